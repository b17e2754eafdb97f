"""Reports (stage `reports`): the study report, result files, run receipts and terminal tables."""
