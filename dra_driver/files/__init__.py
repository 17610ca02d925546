"""Files: atomic writes (`atomic`), inter-process locks (`flock`), the user's cache
directory (`user_cache`, for what a command would otherwise redo on every run)."""
