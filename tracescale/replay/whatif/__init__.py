"""What-ifs: a fitted ``ReplayStudy`` + an edit in -> the edited study or its gains at N out."""
