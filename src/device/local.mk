# src/device: sources, programs and tests of this room (see Makefile.am).
