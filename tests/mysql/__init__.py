"""Tests against a real MySQL server (the session's: PLITZI_MYSQL_URL, a container, or a throwaway one)."""
