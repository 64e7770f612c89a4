"""IP sets: kernel names, desired members, ``ipset save`` parsing and the programmer."""
