"""Files the plugin must not lose: atomic writes (`atomic`) and inter-process locks (`flock`)."""
