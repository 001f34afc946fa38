# src/grid: the process grid, pure arithmetic (see grid.h).
libgridlm_a_SOURCES += %reldir%/grid.c %reldir%/grid.h

check_PROGRAMS += t/grid.t
t_grid_t_SOURCES = t/grid.c
t_grid_t_LDADD = $(TAP_LIBS)
TESTS += t/grid.t
