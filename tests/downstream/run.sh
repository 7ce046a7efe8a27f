#!/usr/bin/env bash
#
# tests/downstream/run.sh - sgc as other projects use it: installed with
# `meson install`, found by their build systems, re-run exactly when a graph
# changes.  Steps:
#
#   1. install    sgc is built in a scratch directory and installed into a
#                 scratch prefix, which must hold sgc, fx2sg, sgc(1),
#                 fx2sg(1), sgc.pc (its variable `sgc` is the installed
#                 compiler) and, with CUDA, libsgrt, its headers and sgrt.pc,
#                 whose flags alone let nvcc build a generated file into a
#                 program that finds libsgrt without LD_LIBRARY_PATH;
#                 `sgc -` with no -o writes to standard output
#   2. meson      samples/ (copied into a directory whose name has a blank,
#                 to exercise the depfile's escaping) as a Meson project:
#                 find_program('sgc') finds the installed sgc;
#                 custom_target(... depfile:) makes .ir.sg files and, when
#                 sgc emits CUDA and nvcc exists, .cu files and programs
#                 linked against the installed libsgrt
#   3. cmake      the same copy as a CMake project (find_program,
#                 add_custom_command DEPFILE), with the Ninja and the Unix
#                 Makefiles generators
#   4. depfiles   in each of the three builds: a second build has nothing to
#                 do; the .sg is recorded as the outputs' dependency; after
#                 an edit of classifier.sg exactly the files made from it
#                 are rebuilt, and none made from mlp.sg
#   5. subproject tests/downstream/subproject has sgc as a Meson subproject
#                 (a link to this checkout): find_program('sgc') and
#                 dependency('sgc') get the subproject's sgc
#   6. run        with a GPU: the programs run, and the classifier's
#                 probabilities match `sgc run` on the CPU
#
# Each check prints `ok NAME`, `FAIL NAME` and why, or `skip NAME (why)`;
# what cannot be done without CUDA (no nvcc, no libsgrt, or an sgc that
# cannot emit CUDA yet) or without a GPU is skipped, saying so.  The last
# line is `N passed, M failed, K skipped`; the exit status is 1 when a
# check failed.
#
# Environment: SGC_DOWNSTREAM_DIR, the scratch directory (default: a new
# one under /tmp, removed at the end unless KEEP=1); SGC_PREFIX, an sgc
# already installed there, to test instead of building one (step 1 then
# checks it).  Without meson, the Meson steps are skipped.  Takes a few
# minutes: it builds sgc twice (install, subproject) and the samples three
# times.

set -u
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
work=${SGC_DOWNSTREAM_DIR:-$(mktemp -d /tmp/sgc-downstream.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
npass=0
nfail=0
nskip=0
start=$SECONDS
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
# Meson 1.0 decodes the output of every program it runs (compilers, nvcc's
# CUDA sanity check, --version probes) as strict UTF-8 when the locale is
# UTF-8, and a single other byte is an unhandled UnicodeDecodeError ("This
# is a Meson bug"), which made this test fail now and then.  In the C
# locale, without Python's coercion to UTF-8, Meson takes its other path,
# which decodes with errors='replace'; the tools' messages are then plain
# ASCII too.
export LC_ALL=C PYTHONCOERCECLOCALE=0 PYTHONUTF8=0

ok() {
	echo "ok $1"
	npass=$((npass + 1))
}

# bad NAME [DETAILS]: a failed check, with its details indented.
bad() {
	echo "FAIL $1"
	[ $# -gt 1 ] && printf '%s\n' "$2" | tail -n 40 | sed 's/^/    /'
	nfail=$((nfail + 1))
}

skip() {
	echo "skip $1 ($2)"
	nskip=$((nskip + 1))
}

# check NAME COMMAND...: runs the command; ok when it succeeds.
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then
		ok "$name"
	else
		bad "$name" "$out"
		return 1
	fi
}

finish() {
	echo "downstream: $((SECONDS - start)) s, scratch directory $work"
	echo "$npass passed, $nfail failed, $nskip skipped"
	if [ "${KEEP:-0}" != 1 ] && [ -z "${SGC_DOWNSTREAM_DIR:-}" ]; then
		rm -rf "$work"
	fi
	[ "$nfail" -eq 0 ]
	exit $?
}

# ------------------------------------------------------------------ 1. install

prefix=${SGC_PREFIX:-$work/prefix}
build=$work/build-sgc
have_meson=1
command -v meson >/dev/null || have_meson=0
# Builds only what is installed (not the tests), then installs it.
install_sgc() {
	meson setup "$build" "$root" --prefix="$prefix" -Dtests=disabled \
		--buildtype=debugoptimized >"$work/setup.log" 2>&1 || {
		cat "$work/setup.log"
		return 1
	}
	local targets
	targets=$(meson introspect "$build" --targets | /usr/bin/python3 -c '
import json, os, sys
b = sys.argv[1]
print(" ".join(os.path.relpath(f, b) for t in json.load(sys.stdin)
               if t["installed"] for f in t["filename"]))' "$build") || return 1
	# shellcheck disable=SC2086
	ninja -C "$build" $targets >"$work/build.log" 2>&1 || {
		grep -v '^\[' "$work/build.log" | head -n 60
		return 1
	}
	meson install -C "$build" --no-rebuild >"$work/install.log" 2>&1 || {
		tail -n 30 "$work/install.log"
		return 1
	}
}
if [ -n "${SGC_PREFIX:-}" ]; then
	echo "== the sgc installed in $prefix"
elif [ $have_meson = 1 ]; then
	echo "== install sgc into $prefix"
	check "install: meson install into a prefix" install_sgc || finish
else
	bad "install: meson install into a prefix" "meson is not installed"
	finish
fi

sgc=$prefix/bin/sgc
pcdir=$(dirname "$(find "$prefix" -name sgc.pc | head -n 1)")
libdir=$(dirname "$pcdir")
export PATH=$prefix/bin:$PATH
export PKG_CONFIG_PATH=$pcdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

check "install: bin/sgc runs" sh -c '"$1" --version | grep -q "^sgc [0-9]"' - "$sgc"
check "install: bin/fx2sg runs" sh -c '"$1" --version | grep -q "^fx2sg [0-9]"' - "$prefix/bin/fx2sg"
man_ok() {
	local page
	for page in sgc fx2sg; do
		[ -f "$prefix/share/man/man1/$page.1" ] || { echo "no man1/$page.1"; return 1; }
		command -v man >/dev/null || continue   # installed; cannot render here
		out=$(MANWIDTH=80 man --warnings -l "$prefix/share/man/man1/$page.1" 2>&1 >/dev/null)
		[ -z "$out" ] || { echo "$page.1: $out"; return 1; }
	done
}
check "install: man pages sgc(1) and fx2sg(1), no groff warnings" man_ok
check "install: sgc.pc variable sgc is the installed sgc" \
	sh -c '[ "$(pkg-config --variable=sgc sgc)" = "$1" ]' - "$sgc"

# The Python package: `import sgc` from the prefix's site directory.
py_import() {
	local init
	init=$(find "$prefix" -path '*/sgc/__init__.py' | head -n 1)
	[ -n "$init" ] || { echo "no sgc/__init__.py under $prefix"; return 1; }
	PYTHONPATH=$(dirname "$(dirname "$init")") /usr/bin/python3 -c \
		'import sgc, sys; sys.exit(sgc.__version__ != "0.1.0" or not callable(sgc.compile))'
}
check "install: import sgc (the Python package) from the prefix" py_import

# Can this machine build the generated CUDA?  (nvcc, libsgrt, and an sgc
# that emits CUDA.)
cuda=disabled
cuda_why=
if ! command -v nvcc >/dev/null; then
	cuda_why="no nvcc"
elif ! pkg-config --exists sgrt; then
	cuda_why="libsgrt was not installed (CUDA not found at configure)"
elif ! out=$("$sgc" "$root/samples/classifier.sg" -o "$work/probe.cu" 2>&1); then
	cuda_why="sgc cannot emit CUDA: $(head -n 1 <<<"$out")"
else
	cuda=enabled
fi
if [ $cuda = enabled ]; then
	check "install: sgrt.pc gives flags, headers installed" sh -c \
		'pkg-config --cflags --libs sgrt >/dev/null && [ -f "$1/include/sgrt/sgrt.h" ]' - "$prefix"
	# nvcc needs nothing but sgrt.pc's flags (sgrt.h and the CUDA toolkit
	# found at configure time), and the program finds the installed
	# libsgrt and the CUDA libraries without LD_LIBRARY_PATH (sgrt.pc's
	# rpath).
	nvcc_pc() {
		"$sgc" "$root/samples/classifier.sg" --main -o "$work/pc_main.cu" &&
			nvcc -arch=sm_90 "$work/pc_main.cu" $(pkg-config --cflags --libs sgrt) \
				-o "$work/pc_main" || return 1
		# The loader itself, without its cache (ldconfig's directories
		# would hide a missing rpath of libsgrt.so's own).
		local deps ld
		ld=$(readelf -l "$work/pc_main" | sed -n 's/.*interpreter: \(.*\)]$/\1/p')
		deps=$(env -u LD_LIBRARY_PATH "$ld" --inhibit-cache --list "$work/pc_main") || return 1
		echo "$deps" | grep -q "libsgrt.so => $libdir/libsgrt.so" ||
			{ echo "libsgrt is not found in $libdir:"; echo "$deps"; return 1; }
		! echo "$deps" | grep "not found"
	}
	check "install: nvcc X.cu \$(pkg-config --cflags --libs sgrt) alone; the program finds libsgrt" nvcc_pc
else
	echo "note: the downstream builds stop at --emit=ir: $cuda_why"
	skip "install: libsgrt and sgrt.pc" "$cuda_why"
fi

# `sgc -` (standard input) with no -o writes the CUDA C to standard output
# and leaves no file behind (no "-.cu").
stdin_out() {
	local d=$work/stdin out
	mkdir -p "$d"
	out=$(cd "$d" && "$sgc" - <"$root/samples/classifier.sg") || return 1
	case $out in "// Generated by sgc"*) ;; *) echo "stdout: ${out:0:200}"; return 1 ;; esac
	[ -z "$(ls -A "$d")" ] || { echo "files written: $(ls -A "$d")"; return 1; }
}
if out=$("$sgc" "$root/samples/classifier.sg" -o - 2>&1); then
	check "install: sgc - with no -o writes to standard output" stdin_out
else
	skip "install: sgc - with no -o" "sgc cannot emit CUDA"
fi

# ------------------------------------------------------------------ 2, 3. the samples project

src="$work/samples copy"
rm -rf "$src"
cp -r "$root/samples" "$src"
rm -rf "$src"/build* "$src/__pycache__"

# Outputs of the samples project, per source graph, at the top of a build
# directory (with CUDA: also the programs and the API files).
outputs() {
	local g=$1
	echo "$g.ir.sg"
	if [ $cuda = enabled ]; then
		echo "$g.cu"
		echo "$g"
		[ "$g" = classifier ] && printf '%s\n' classifier_api.cu classifier.h classifier_app
	fi
}

# has_outputs DIR: every expected output exists.
has_outputs() {
	local f
	for f in $(outputs mlp) $(outputs classifier); do
		[ -e "$1/$f" ] || { echo "missing $1/$f"; return 1; }
	done
}

# same_ir DIR: the build's .ir.sg is what the installed sgc prints.
same_ir() {
	"$sgc" "$src/classifier.sg" --emit=ir -o - | cmp - "$1/classifier.ir.sg"
}

declare -A built=()
mb=$work/build-meson
echo "== samples as a Meson project ($cuda)"
if [ $have_meson = 0 ]; then
	skip "meson: the samples" "meson is not installed"
elif check "meson: configure (find_program finds the installed sgc)" sh -c '
	meson setup "$1" "$2" -Dcuda="$3" >"$1.log" 2>&1 || { cat "$1.log"; exit 1; }
	grep -q "Program sgc found: YES.*($4)" "$1/meson-logs/meson-log.txt" ||
		{ echo "sgc not found at $4:"; grep "Program sgc" "$1/meson-logs/meson-log.txt"; exit 1; }' \
	- "$mb" "$src" "$cuda" "$sgc"; then
	if check "meson: build" ninja -C "$mb"; then
		check "meson: outputs" has_outputs "$mb" && built[meson]=$mb
		check "meson: .ir.sg is sgc's --emit=ir" same_ir "$mb"
	fi
fi

cmake_flag=OFF
[ $cuda = enabled ] && cmake_flag=ON
for gen in Ninja "Unix Makefiles"; do
	tag=cmake-${gen%% *}
	cb=$work/build-$tag
	echo "== samples as a CMake project, $gen generator ($cuda)"
	if check "$tag: configure (find_program finds the installed sgc)" sh -c '
		cmake -S "$1" -B "$2" -G "$3" -DSGC_SAMPLES_CUDA="$4" >"$2.log" 2>&1 ||
			{ cat "$2.log"; exit 1; }
		grep -q "^SGC:FILEPATH=$5\$" "$2/CMakeCache.txt" ||
			{ echo "SGC is not $5:"; grep "^SGC:" "$2/CMakeCache.txt"; exit 1; }' \
		- "$src" "$cb" "$gen" "$cmake_flag" "$sgc"; then
		if check "$tag: build" cmake --build "$cb" -j 2; then
			check "$tag: outputs" has_outputs "$cb" && built[$tag]=$cb
			check "$tag: .ir.sg is sgc's --emit=ir" same_ir "$cb"
		fi
	fi
done

# ------------------------------------------------------------------ 4. depfiles

# nothing_to_do KIND DIR: a second build would run no command.
nothing_to_do() {
	case $1 in
	meson | cmake-Ninja)
		ninja -C "$2" -n | grep -q "no work to do" || { ninja -C "$2" -n -d explain 2>&1 | head; return 1; } ;;
	cmake-Unix)
		! make -C "$2" -n 2>&1 | grep -F -- "-MF" ;;
	esac
}

# dep_recorded KIND DIR: the build system holds classifier.sg as a
# dependency read from sgc's depfile.
dep_recorded() {
	case $1 in
	meson | cmake-Ninja)
		# With `deps = gcc` Ninja moved the depfile into .ninja_deps
		# (the path as sgc was given it, relative or not) ...
		ninja -C "$2" -t deps | grep -qF "samples copy/classifier.sg" && return 0
		# ... else (CMake 3.2x) it reads the depfile, which CMake copies
		# from sgc's, at each build: the edge's `depfile =`.
		local df
		df=$(awk '/^build classifier\.ir\.sg[ |:]/ { f = 1 }
			f && /^  depfile = / { print $3; exit }' "$2/build.ninja")
		[ -n "$df" ] && grep -qF 'samples\ copy/classifier.sg' "$df" && return 0
		echo "neither .ninja_deps nor a depfile of classifier.ir.sg names samples copy/classifier.sg"
		return 1 ;;
	cmake-Unix)
		# CMake registers the depfile (DependInfo.cmake) and merges it
		# into the compiler_depend.make that Make includes (CMake 3.2x at
		# once, 4.x at the next build): sgc's rule, with the blank
		# escaped, must be in one of them.
		local rule="classifier.ir.sg: ${src// /\\ }/classifier.sg"
		local dir=$2/CMakeFiles/classifier_ir.dir
		grep -qF "$rule" "$dir/compiler_depend.make" && return 0
		grep -qF '"classifier.ir.sg.d"' "$dir/DependInfo.cmake" &&
			grep -qF "$rule" "$2/classifier.ir.sg.d" && return 0
		echo "no registered depfile with: $rule"
		cat "$dir/compiler_depend.make" "$2/classifier.ir.sg.d"
		return 1 ;;
	esac
}

if [ ${#built[@]} -gt 0 ]; then
	for kind in "${!built[@]}"; do
		check "$kind: depfile: a second build has nothing to do" nothing_to_do "$kind" "${built[$kind]}"
		check "$kind: depfile: the .sg is recorded as a dependency" dep_recorded "$kind" "${built[$kind]}"
	done
	stamp=$work/stamp
	touch "$stamp"
	sleep 1.1
	printf '\n# edited by tests/downstream/run.sh\n' >>"$src/classifier.sg"
	# rebuilt_exactly DIR CMD...: after the edit, the build remakes every
	# output of classifier.sg and no output of mlp.sg.
	rebuilt_exactly() {
		local dir=$1 f why=
		shift
		"$@" >"$dir.rebuild.log" 2>&1 || { cat "$dir.rebuild.log"; return 1; }
		for f in $(outputs classifier); do
			[ "$dir/$f" -nt "$stamp" ] || why="$why $f was not rebuilt;"
		done
		for f in $(outputs mlp); do
			[ "$dir/$f" -nt "$stamp" ] && why="$why $f was rebuilt;"
		done
		[ -z "$why" ] || { echo "$why"; return 1; }
	}
	for kind in "${!built[@]}"; do
		d=${built[$kind]}
		if [ "$kind" = meson ]; then
			check "$kind: depfile: editing classifier.sg rebuilds exactly its outputs" \
				rebuilt_exactly "$d" ninja -C "$d"
		else
			check "$kind: depfile: editing classifier.sg rebuilds exactly its outputs" \
				rebuilt_exactly "$d" cmake --build "$d"
		fi
		check "$kind: depfile: then nothing to do again" nothing_to_do "$kind" "$d"
	done
else
	skip "depfiles" "no build of the samples succeeded"
fi

# ------------------------------------------------------------------ 5. subproject

echo "== sgc as a Meson subproject"
[ $have_meson = 1 ] || skip "subproject" "meson is not installed"
sub=$work/subproject
rm -rf "$sub"
cp -r "$root/tests/downstream/subproject" "$sub"
mkdir -p "$sub/subprojects"
ln -s "$root" "$sub/subprojects/sgc"
sb=$work/build-subproject
subtargets="tiny.ir.sg"
[ $cuda = enabled ] && subtargets="$subtargets tiny"
if [ $have_meson = 1 ] && check "subproject: configure (overrides give the subproject's sgc)" sh -c '
	meson setup "$1" "$2" -Dcuda="$3" >"$1.log" 2>&1 || { cat "$1.log"; exit 1; }' \
	- "$sb" "$sub" "$cuda"; then
	# shellcheck disable=SC2086
	if check "subproject: build with the subproject's sgc" ninja -C "$sb" $subtargets; then
		check "subproject: tiny.ir.sg is --emit=ir output" sh -c \
			'"$1" "$2" --emit=ir -o - | cmp - "$3"' - "$sgc" "$sub/tiny.sg" "$sb/tiny.ir.sg"
	fi
fi

# ------------------------------------------------------------------ 6. run

# A Python with numpy, for the files of the run.
py=
for p in /usr/bin/python3 python3; do
	if "$p" -c 'import numpy' 2>/dev/null; then
		py=$p
		break
	fi
done

# write_inputs FILE NAME=ROWSxCOLS...: f32 inputs x[i][j] = sin(i + j + k)
# (k counts the tensors) in a safetensors file, with numpy alone.
write_inputs() {
	"$py" - "$@" <<'EOF'
import json, struct, sys
import numpy as np
path, specs = sys.argv[1], sys.argv[2:]
header, blobs, off = {}, [], 0
for k, spec in enumerate(specs):
    name, shape = spec.split("=")
    r, c = (int(v) for v in shape.split("x"))
    a = np.sin(np.add.outer(np.arange(r), np.arange(c)) + k).astype("<f4")
    b = a.tobytes()
    header[name] = {"dtype": "F32", "shape": [r, c], "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
EOF
}

# same_tensor A B NAME: tensor NAME of two safetensors files agrees (f32,
# within 1e-5 absolute).
same_tensor() {
	"$py" - "$@" <<'EOF'
import json, struct, sys
import numpy as np
def load(p, name):
    d = open(p, "rb").read()
    (n,) = struct.unpack("<Q", d[:8])
    e = json.loads(d[8:8 + n])[name]
    b, end = e["data_offsets"]
    return np.frombuffer(d[8 + n + b:8 + n + end], "<f4").reshape(e["shape"])
a, b = load(sys.argv[1], sys.argv[3]), load(sys.argv[2], sys.argv[3])
err = float(np.abs(a - b).max())
print("max difference %g" % err)
sys.exit(0 if a.shape == b.shape and err <= 1e-5 else 1)
EOF
}

echo "== run the programs"
if [ $cuda != enabled ]; then
	skip "run" "$cuda_why"
elif ! nvidia-smi -L >/dev/null 2>&1; then
	skip "run" "no GPU"
elif [ -z "$py" ]; then
	skip "run" "no Python with numpy"
elif [ -z "${built[meson]:-}${built[cmake-Ninja]:-}" ]; then
	skip "run" "no build of the samples succeeded"
else
	d=${built[meson]:-${built[cmake-Ninja]}}
	check "run: classifier_app (the generated C API)" "$d/classifier_app"
	write_inputs "$work/cls_in.safetensors" x=8x32
	if check "run: classifier (--main driver)" "$d/classifier" \
		--inputs "$work/cls_in.safetensors" --out "$work/cls_gpu.safetensors" &&
		check "run: sgc run classifier.sg" "$sgc" run "$src/classifier.sg" \
			--inputs "$work/cls_in.safetensors" --out "$work/cls_cpu.safetensors"; then
		check "run: GPU probabilities match sgc run" same_tensor \
			"$work/cls_gpu.safetensors" "$work/cls_cpu.safetensors" probs
	fi
	write_inputs "$work/mlp_in.safetensors" x=64x1024 y=64x1024
	check "run: mlp, two training steps" "$d/mlp" --inputs "$work/mlp_in.safetensors" \
		--steps 2 --out "$work/mlp_out.safetensors"
fi

finish
