"""How sessions look to a person: on a terminal, and over time.

:mod:`.terminal` renders events, sessions and trees as readable lines; :mod:`.timeline` builds the
model of a session tree over time (actions with their stages, and a summary), which :mod:`.html`
draws as one self-contained page (``gz-ia session view``). They read through
:mod:`gz_ia.collector.reading` and write nothing.
"""
