# slurm/: sbatch templates and environment modules (see Makefile.am).
#
# The job scripts install as data under $(pkgdatadir)/slurm; the
# modulefiles (Lmod .lua and Tcl) are made from templates with this
# build's directories and installed as
#   $(datadir)/modulefiles/gridlm/$(VERSION).lua   (Lmod)
#   $(datadir)/modulefiles/gridlm/$(VERSION)       (Tcl: Environment Modules, Lmod)
# so that `module use $(datadir)/modulefiles; module load gridlm` works.

slurmdir = $(pkgdatadir)/slurm
dist_slurm_DATA = %reldir%/tiny.sbatch %reldir%/llama8b.sbatch %reldir%/llama70b.sbatch

# The modulefiles are made by sed, not configure, so they follow a
# prefix given to make itself (`make install prefix=/opt/gridlm`): the
# stamp below holds the directories they were made with and changes,
# making them again, only when those do.
modulefiledir = $(datadir)/modulefiles/gridlm
nodist_modulefile_DATA = %reldir%/modulefiles/$(VERSION).lua %reldir%/modulefiles/$(VERSION)
EXTRA_DIST += %reldir%/gridlm.lua.in %reldir%/gridlm.tcl.in
CLEANFILES += $(nodist_modulefile_DATA) %reldir%/modulefiles/dirs.stamp

gl_modulefile_edit = $(SED) \
	-e 's|@prefix[@]|$(prefix)|g' \
	-e 's|@bindir[@]|$(bindir)|g' \
	-e 's|@mandir[@]|$(mandir)|g' \
	-e 's|@datadir[@]|$(datadir)|g' \
	-e 's|@pkgdatadir[@]|$(pkgdatadir)|g' \
	-e 's|@VERSION[@]|$(VERSION)|g' \
	-e 's|@PACKAGE_BUGREPORT[@]|$(PACKAGE_BUGREPORT)|g' \
	-e 's|@GL_MPI_FLAVOR[@]|$(GL_MPI_FLAVOR)|g'

%reldir%/modulefiles/dirs.stamp: gl-modulefile-dirs-check
	@$(MKDIR_P) $(@D)
	@echo '$(prefix) $(datadir) $(bindir) $(mandir) $(pkgdatadir) $(VERSION) $(GL_MPI_FLAVOR)' >$@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi
gl-modulefile-dirs-check:
.PHONY: gl-modulefile-dirs-check

%reldir%/modulefiles/$(VERSION).lua: $(srcdir)/%reldir%/gridlm.lua.in %reldir%/modulefiles/dirs.stamp
	$(AM_V_GEN)rm -f $@ $@.tmp && $(gl_modulefile_edit) $(srcdir)/%reldir%/gridlm.lua.in >$@.tmp && mv -f $@.tmp $@
%reldir%/modulefiles/$(VERSION): $(srcdir)/%reldir%/gridlm.tcl.in %reldir%/modulefiles/dirs.stamp
	$(AM_V_GEN)rm -f $@ $@.tmp && $(gl_modulefile_edit) $(srcdir)/%reldir%/gridlm.tcl.in >$@.tmp && mv -f $@.tmp $@

# Tests: gridlm under a real Slurm that t/slurm-lib.sh starts on
# localhost (t/slurm.t, with t/slurm-hello: MPI bootstrap under srun;
# t/slurm-preempt.t: tiny.sbatch trains, is preempted, requeues itself
# and resumes), and `make install` to a scratch prefix, loaded as a
# module (t/install.t).
check_PROGRAMS += t/slurm-hello
t_slurm_hello_SOURCES = t/slurm-hello.c
t_slurm_hello_LDADD =
dist_check_SCRIPTS += t/slurm.t t/slurm-preempt.t t/install.t
TESTS += t/slurm.t t/slurm-preempt.t t/install.t
EXTRA_DIST += t/slurm-lib.sh

# The two quick-start commands of README.md.
EXTRA_DIST += quickstart.sh ci-test.sh debian-packages.txt

# scaling.sbatch: weak and strong scaling of Llama 3 8B over 8 to 64 GPUs,
# through benchmarks/sweep.sh (installed in $(pkgdatadir)/benchmarks,
# where the script finds it from $GRIDLM_SLURM).
dist_slurm_DATA += %reldir%/scaling.sbatch
