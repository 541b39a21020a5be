"""Process plumbing every service uses: Redis connections, loops, logs, settings, health."""
