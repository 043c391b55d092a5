"""What runs leave behind: run records, campaigns, timelines, message traces, progress lines."""
