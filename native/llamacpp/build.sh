#!/usr/bin/env bash
# Build Clover's llama.cpp back end (docs/llama-cpp.md): the pinned llama.cpp source, as the
# PyPI sdist of llama-cpp-python carries it under vendor/llama.cpp, is downloaded with pip,
# checked against its sha256, unpacked into a cache directory, and ggml (CPU only, Release) is
# built there together with libclover from native/llamacpp. A second run does nothing unless the
# pin (clover/backends/llamacpp.pin) or Clover's C++ files changed (a hash stamp).
#
#   native/llamacpp/build.sh            # prints the library's path
#   native/llamacpp/build.sh stock      # stock libllama and clover-stock-bench (for `clover bench llama.cpp`)
#   native/llamacpp/build.sh pin        # prints the pin (the cache directory's name), builds nothing
#   CLOVER_LLAMACPP_JOBS=2 ...          # parallel compile jobs (default 1)
#   CLOVER_LLAMACPP_CACHE=DIR ...       # cache root (default ${XDG_CACHE_HOME:-~/.cache}/clover/llama.cpp)
set -euo pipefail

# the pin, written once in clover/backends/llamacpp.pin (key=value lines, which the Python side
# reads too), read with bash alone so that nothing runs before the tool check below
HERE="$(cd "${0%/*}" && pwd)"
PIN_FILE="$HERE/../../clover/backends/llamacpp.pin"
PIN_PACKAGE="" PIN_VERSION="" PIN_SHA256=""
while IFS="=" read -r key value; do
    case "$key" in
        package) PIN_PACKAGE="$value" ;;
        version) PIN_VERSION="$value" ;;
        sha256) PIN_SHA256="$value" ;;
    esac
done <"$PIN_FILE"
if [[ -z "$PIN_PACKAGE" || -z "$PIN_VERSION" || -z "$PIN_SHA256" ]]; then
    echo "llama-cpp: $PIN_FILE needs package=, version= and sha256= lines" >&2
    exit 1
fi
PIN="${PIN_VERSION}-${PIN_SHA256:0:12}"
if [[ "${1:-}" == pin ]]; then
    echo "$PIN"
    exit 0
fi

# first, before any other tool runs: a compiler and cmake (one line naming what to install)
missing=()
for tool in cmake c++ cc make tar sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
    echo "llama-cpp: ${missing[*]} not found; install a C/C++ compiler and cmake (Debian/Ubuntu: apt install g++ cmake make)" >&2
    exit 1
fi

PY="${PYTHON:-python3}"
JOBS="${CLOVER_LLAMACPP_JOBS:-1}"
ROOT="${CLOVER_LLAMACPP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/clover/llama.cpp}"
DIR="$ROOT/$PIN"
SRC="$DIR/src"
BUILD="$DIR/build"
LIB="$DIR/lib/libclover.so"
MODE="${1:-clover}"

# what the library (or, for stock, the timing program) is built from: the pin, Clover's C++ sources
# and this script
stamp_of() {
    if [[ "$MODE" == stock ]]; then
        { echo "$PIN"; cat "$HERE"/stock/CMakeLists.txt "$HERE"/stock/*.cpp; } | sha256sum | cut -c1-16
    else
        { echo "$PIN"; cat "$HERE"/CMakeLists.txt "$HERE"/*.h "$HERE"/*.cpp "$HERE"/build.sh; } | sha256sum | cut -c1-16
    fi
}
STAMP="$(stamp_of)"
if [[ "$MODE" == stock ]]; then
    LIB="$DIR/bin/clover-stock-bench"
    STAMP_FILE="$DIR/bin/stamp"
else
    STAMP_FILE="$DIR/lib/stamp"
fi
if [[ -f "$LIB" && -f "$STAMP_FILE" && "$(cat "$STAMP_FILE")" == "$STAMP" ]]; then
    echo "$LIB"
    exit 0
fi

mkdir -p "$DIR"
if [[ ! -f "$SRC/.unpacked" ]]; then
    tarball="$DIR/llama_cpp_python-${PIN_VERSION}.tar.gz"
    if [[ ! -f "$tarball" ]]; then
        echo "llama-cpp: downloading ${PIN_PACKAGE}==${PIN_VERSION} (source distribution) with pip" >&2
        "$PY" -m pip download -q --no-deps --no-binary :all: --dest "$DIR/download" "${PIN_PACKAGE}==${PIN_VERSION}" >&2
        mv "$DIR/download/llama_cpp_python-${PIN_VERSION}.tar.gz" "$tarball"
        rm -rf "$DIR/download"
    fi
    got="$(sha256sum "$tarball" | cut -d' ' -f1)"
    if [[ "$got" != "$PIN_SHA256" ]]; then
        rm -f "$tarball"
        echo "llama-cpp: sha256 of ${PIN_PACKAGE}-${PIN_VERSION} is $got, expected $PIN_SHA256" >&2
        exit 1
    fi
    rm -rf "$SRC" "$DIR/unpack"
    mkdir -p "$DIR/unpack"
    tar -xzf "$tarball" -C "$DIR/unpack" "llama_cpp_python-${PIN_VERSION}/vendor/llama.cpp"
    mv "$DIR/unpack/llama_cpp_python-${PIN_VERSION}/vendor/llama.cpp" "$SRC"
    rm -rf "$DIR/unpack"
    touch "$SRC/.unpacked"
fi

# ggml's instruction sets: on x86-64 the ones this CPU has, named one by one (GGML_NATIVE would
# also compile in AMX paths, which crash on some virtual machines); elsewhere the compiler's native
simd=(-DGGML_NATIVE=OFF)
if [[ "$(uname -m)" == x86_64 ]]; then
    flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
    has() { [[ " $flags " == *" $1 "* ]] && echo ON || echo OFF; }
    simd+=(-DGGML_SSE42="$(has sse4_2)" -DGGML_AVX="$(has avx)" -DGGML_AVX2="$(has avx2)" -DGGML_FMA="$(has fma)"
           -DGGML_F16C="$(has f16c)" -DGGML_BMI2="$(has bmi2)")
    if [[ "$(has avx512f)$(has avx512bw)$(has avx512vl)" == ONONON ]]; then
        simd+=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI="$(has avx512_vnni)")
    fi
else
    simd=(-DGGML_NATIVE=ON)
fi

# a build folder configured from another checkout (a clone elsewhere, a worktree) cannot be
# reconfigured from this one: start it afresh
fresh_build() {
    local build="$1" src="$2"
    if [[ -f "$build/CMakeCache.txt" ]] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$build/CMakeCache.txt"; then
        rm -rf "$build"
    fi
}

if [[ "$MODE" == stock ]]; then
    BUILD="$DIR/build-stock"
    fresh_build "$BUILD" "$HERE/stock"
    echo "llama-cpp: building stock libllama and clover-stock-bench in $BUILD (${JOBS} job(s))" >&2
    cmake -S "$HERE/stock" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLLAMACPP_SRC="$SRC" "${simd[@]}" \
        >"$DIR/cmake-stock.log" 2>&1 \
        || { cat "$DIR/cmake-stock.log" >&2; echo "llama-cpp: cmake configure failed (log: $DIR/cmake-stock.log)" >&2; exit 1; }
    cmake --build "$BUILD" --target clover-stock-bench -j "$JOBS" >"$DIR/build-stock.log" 2>&1 \
        || { tail -n 40 "$DIR/build-stock.log" >&2; echo "llama-cpp: build failed (log: $DIR/build-stock.log)" >&2; exit 1; }
    mkdir -p "$DIR/bin"
    cp "$BUILD/clover-stock-bench" "$LIB.tmp" && mv "$LIB.tmp" "$LIB"
    echo "$STAMP" >"$STAMP_FILE"
    echo "$LIB"
    exit 0
fi

echo "llama-cpp: building ggml and libclover in $BUILD (${JOBS} job(s))" >&2
fresh_build "$BUILD" "$HERE"
cmake -S "$HERE" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLLAMACPP_SRC="$SRC" "${simd[@]}" >"$DIR/cmake.log" 2>&1 \
    || { cat "$DIR/cmake.log" >&2; echo "llama-cpp: cmake configure failed (log: $DIR/cmake.log)" >&2; exit 1; }
cmake --build "$BUILD" --target clover -j "$JOBS" >"$DIR/build.log" 2>&1 \
    || { tail -n 40 "$DIR/build.log" >&2; echo "llama-cpp: build failed (log: $DIR/build.log)" >&2; exit 1; }
mkdir -p "$DIR/lib"
cp "$BUILD/libclover.so" "$LIB.tmp" && mv "$LIB.tmp" "$LIB"
echo "$STAMP" >"$DIR/lib/stamp"
echo "$LIB"
