#!/bin/sh
# t/install.t: `make install` into a scratch prefix, then use it as a
# site would: load the installed modulefile (Lmod's .lua, then the Tcl
# one) and check that gridlm-train and its manual are found through it
# and that the program answers --version.  Finally `make uninstall`
# must leave no file behind.  The Lmod checks skip where Lmod is not
# installed (apt-get install lmod).

: "${top_builddir:=.}"
[ -n "$GL_MPI_FLAVOR" ] || . "$top_builddir/t/env.sh"
. "$(dirname "$0")/tap.sh"

# A variable of the build's Makefile, its continuation lines joined.
mk() { sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$top_builddir/Makefile" | sed -n "s/^$1 = *//p"; }
version=$(mk VERSION)
[ -n "$version" ] || skip_all "no $top_builddir/Makefile"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gl-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
prefix=$tmp/prefix

# A make of its own, not a part of the `make check` that runs this test.
domake() {
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES \
        ${MAKE:-make} -C "$top_builddir" "$@" prefix="$prefix" >"$tmp/make.out" 2>&1
}

domake install
st=$?
ok $st "make install prefix=$prefix"
[ $st -eq 0 ] || tail -n 30 "$tmp/make.out" | diag

# What a site gets.
train_built=no
[ -x "$top_builddir/src/tools/gridlm-train" ] && train_built=yes
for f in share/gridlm/slurm/tiny.sbatch share/gridlm/slurm/llama8b.sbatch \
         share/gridlm/slurm/llama70b.sbatch share/gridlm/slurm/scaling.sbatch \
         "share/modulefiles/gridlm/$version.lua" "share/modulefiles/gridlm/$version"; do
    [ -f "$prefix/$f" ]
    ok $? "installed $f"
done
if [ $train_built = yes ]; then
    [ -x "$prefix/bin/gridlm-train" ]
    ok $? "installed bin/gridlm-train"
else
    skip "installed bin/gridlm-train" "not built"
fi

# The installed benchmark scripts find the installed gridlm-train on
# their own (benchmarks/find-train.sh: PREFIX/share/gridlm/benchmarks ->
# PREFIX/bin), run from a directory that is no build directory.
bench=$prefix/share/gridlm/benchmarks
if [ $train_built = yes ]; then
    (cd "$tmp" && env -u GRIDLM_TRAIN sh "$bench/project.sh" --achieved-tflops 400 \
        "$bench/project-1-2-4.sweep") >"$tmp/project.out" 2>&1
    st=$?
    ok $st "the installed project.sh finds the installed gridlm-train and projects"
    [ $st -eq 0 ] || tail -n 5 "$tmp/project.out" | diag
else
    skip "the installed project.sh finds the installed gridlm-train" "not built"
fi

# The modulefiles name this prefix, and nothing is left unsubstituted.
for f in "$version.lua" "$version"; do
    m=$prefix/share/modulefiles/gridlm/$f
    grep -q "$prefix/bin" "$m" && grep -q "$prefix/share/man" "$m" && ! grep -q '@[a-zA-Z_]*@' "$m"
    ok $? "modulefile $f names $prefix/bin and $prefix/share/man, no @VAR@ left"
done

# Load each modulefile with Lmod in a clean shell.  The Tcl one is
# copied to a tree of its own, where no .lua twin hides it.
lmod_init=
for f in /usr/share/lmod/lmod/init/sh /usr/share/lmod/lmod/init/bash \
         "${LMOD_PKG:-/nonexistent}/init/sh"; do
    [ -f "$f" ] && { lmod_init=$f; break; }
done
mkdir -p "$tmp/tcl/gridlm"
cp "$prefix/share/modulefiles/gridlm/$version" "$tmp/tcl/gridlm/" 2>/dev/null

load_check() {  # load_check KIND MODULEPATH
    kind=$1
    if [ -z "$lmod_init" ]; then
        skip "module load gridlm ($kind)" "no Lmod (apt-get install lmod)"
        return
    fi
    env -i HOME="$tmp" PATH=/usr/bin:/bin TERM=dumb LANG=C \
        sh -c '. "$1" >/dev/null 2>&1; module use "$2" && module load gridlm &&
               echo "train=$(command -v gridlm-train)" &&
               echo "MANPATH=$MANPATH" && echo "GRIDLM_SLURM=$GRIDLM_SLURM" &&
               { [ "$3" = no ] || gridlm-train --version; }' \
        sh "$lmod_init" "$2" $train_built >"$tmp/load.out" 2>&1
    st=$?
    ok $st "module use; module load gridlm ($kind) succeeds"
    if [ $train_built = yes ]; then
        grep -qx "train=$prefix/bin/gridlm-train" "$tmp/load.out"
        ok $? "($kind) gridlm-train on PATH is $prefix/bin/gridlm-train"
        grep -q "$version" "$tmp/load.out"
        ok $? "($kind) gridlm-train --version answers $version"
    else
        skip "($kind) gridlm-train on PATH, --version" "gridlm-train not built"
    fi
    grep -q "^MANPATH=.*$prefix/share/man" "$tmp/load.out"
    ok $? "($kind) MANPATH has $prefix/share/man"
    grep -q '^MANPATH=.*::*$' "$tmp/load.out"
    ok $? "($kind) MANPATH keeps man's default search path (a trailing ':')"
    grep -qx "GRIDLM_SLURM=$prefix/share/gridlm/slurm" "$tmp/load.out"
    ok $? "($kind) GRIDLM_SLURM names the installed job scripts"
    diag <"$tmp/load.out"
}
load_check Lmod "$prefix/share/modulefiles"
load_check Tcl "$tmp/tcl"

# The manual: every man page built here is installed where MANPATH says.
mans=$(mk dist_man_MANS)
if [ -n "$mans" ]; then
    for m in $mans; do
        base=${m##*/} sect=${m##*.}
        [ -f "$prefix/share/man/man$sect/$base" ]
        ok $? "installed man page man$sect/$base"
    done
else
    skip "installed man pages" "none in this build"
fi

domake uninstall
st=$?
left=$(find "$prefix" -type f 2>/dev/null)
[ $st -eq 0 ] && [ -z "$left" ]
ok $? "make uninstall leaves no files"
[ -z "$left" ] || echo "$left" | diag

done_testing
