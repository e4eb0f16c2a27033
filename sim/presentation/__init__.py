"""What ctxbench writes for people: tables, figures, reports, results directories."""
