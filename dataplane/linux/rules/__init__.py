"""The rule model both backends serialise: typed matches, actions, origins.

Renderers say *what* a rule matches and does once, in these values; the
iptables serialiser (``iptables/serialise.py``) and the nftables one
(``nftables/serialise.py``) each say it in their own syntax -- including
how to OR several values where one rule of theirs cannot. Pure values;
nothing here knows either syntax.
"""
