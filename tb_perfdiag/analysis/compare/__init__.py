"""Before and after: two diagnoses compared, and a run held to its budgets."""
