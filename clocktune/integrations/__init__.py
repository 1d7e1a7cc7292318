"""Integrations with the frameworks real-time voice agents are built in (optional extras): :mod:`.pipecat`."""
