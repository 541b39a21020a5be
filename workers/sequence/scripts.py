"""The Lua a holding instance runs now lives in ``shared/lua/``: ``sequence_commit.lua`` (commit a
batch of steps), ``sequence_release_idle.lua`` (release idle sequences) and
``sequence_adopt.lua`` (adopt or hand over the sequences of a gone instance), loaded by
``shared.lua`` and called from ``workers.sequence.store``.

Kept as a pointer (no code) so that this module's path stays while packages are reorganised;
delete it once nothing refers to it.
"""
