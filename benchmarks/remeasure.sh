#!/usr/bin/env bash
# Re-measure what the docs quote, one command after another, then regenerate the docs' tables.
#
#   benchmarks/remeasure.sh                     # the cpu set (benchmarks/remeasure.txt), then docs_tables.py
#   benchmarks/remeasure.sh decode accuracy     # these result files only (NAME), or a GROUP, or all
#   benchmarks/remeasure.sh --dry-run [NAME…]   # the estimate and the commands, nothing run
#   benchmarks/remeasure.sh --list              # every entry: name, minutes, group, command
#
# Each line of benchmarks/remeasure.txt writes benchmarks/results/NAME.json. The commands run in
# the order listed, never two at once (a lock keeps a second remeasure.sh out), with
# OMP_NUM_THREADS=1, each one's output in $LOG_DIR/NAME.log (default: a new temporary folder).
# A command that fails is reported and the batch goes on; its result file stays as it was. Run it
# from a committed tree: a result file names the commit it measured, and marks it dirty otherwise.
# PYTHON: the interpreter (default .venv/bin/python when there is one, else python3).
set -u -o pipefail
cd "$(dirname "$0")/.."
LIST=${REMEASURE_LIST:-benchmarks/remeasure.txt}  # REMEASURE_LIST: another list (the tests use one)
PYTHON=${PYTHON:-$(test -x .venv/bin/python && echo .venv/bin/python || echo python3)}

dry=0 list=0 want=()
for a in "$@"; do
    case $a in
        --dry-run) dry=1 ;;
        --list) list=1 ;;
        -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "remeasure.sh: unknown option $a (--dry-run, --list, --help)" >&2; exit 2 ;;
        *) want+=("$a") ;;
    esac
done

names=() minutes=() groups=() commands=()
while read -r name min group command; do
    names+=("$name") minutes+=("$min") groups+=("$group") commands+=("$command")
done < <(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$LIST")

if ((list)); then
    for i in "${!names[@]}"; do
        printf '%-15s %4s min  %-9s %s\n' "${names[i]}" "${minutes[i]}" "${groups[i]}" "${commands[i]}"
    done
    exit 0
fi

# what to run: each word a NAME, a GROUP or all; none: the cpu group
((${#want[@]})) || want=(cpu)
picked=()
for w in "${want[@]}"; do
    found=0
    for i in "${!names[@]}"; do
        if [[ $w == all || $w == "${names[i]}" || $w == "${groups[i]}" ]]; then
            [[ " ${picked[*]-} " == *" $i "* ]] || picked+=("$i")
            found=1
        fi
    done
    if ((!found)); then
        echo "remeasure.sh: no entry or group '$w' in $LIST; names: ${names[*]}; groups: $(printf '%s\n' "${groups[@]}" | sort -u | tr '\n' ' ')all" >&2
        exit 2
    fi
done

total=0
for i in "${picked[@]}"; do total=$((total + minutes[i])); done
echo "remeasure.sh: ${#picked[@]} command(s), about $total minutes on a 2-core CPU at one thread (estimates: $LIST)"

if [[ -n $(git status --porcelain -- . ':(exclude)benchmarks/results' ':(exclude,glob)**/*.md' 2>/dev/null) ]]; then
    echo "remeasure.sh: warning: the tree has uncommitted changes; every result file will be marked dirty" >&2
fi

# the argument list of entry $1, $VARS expanded from the environment; fails naming an unset one
argv_of() {
    local command=${commands[$1]} v
    for v in $(grep -o '\$[A-Za-z_][A-Za-z0-9_]*' <<<"$command" | tr -d '$'); do
        if [[ -z ${!v:-} ]]; then
            echo "\$$v is not set" >&2
            return 1
        fi
    done
    eval "set -- $command"
    case $1 in
        clover) shift; args=("$PYTHON" -m clover "$@") ;;
        python) shift; args=("$PYTHON" "$@") ;;
        *) echo "a command starts with clover or python, not $1" >&2; return 1 ;;
    esac
}

if ((dry)); then
    for i in "${picked[@]}"; do
        printf '%-15s %4s min  %s\n' "${names[i]}" "${minutes[i]}" "${commands[i]}"
    done
    exit 0
fi

exec 9>"${TMPDIR:-/tmp}/clover-remeasure.lock"
if ! flock -n 9; then
    echo "remeasure.sh: another remeasure.sh is running (${TMPDIR:-/tmp}/clover-remeasure.lock); one batch at a time" >&2
    exit 1
fi
LOG_DIR=${LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/clover-remeasure.XXXXXX")}
mkdir -p "$LOG_DIR"
echo "remeasure.sh: logs in $LOG_DIR"
export OMP_NUM_THREADS=1

done_ok=() failed=() skipped=()
for i in "${picked[@]}"; do
    name=${names[i]}
    if ! argv_of "$i" 2>"$LOG_DIR/$name.log"; then
        echo "remeasure.sh: $name skipped: $(cat "$LOG_DIR/$name.log")" >&2
        skipped+=("$name")
        continue
    fi
    echo "remeasure.sh: $name (about ${minutes[i]} min): ${commands[i]}"
    start=$SECONDS
    "${args[@]}" >"$LOG_DIR/$name.log" 2>&1
    rc=$?
    took="$(((SECONDS - start + 30) / 60)) min"
    if ((rc == 0)); then
        done_ok+=("$name")
        echo "remeasure.sh: $name done in $took"
    else
        failed+=("$name")
        echo "remeasure.sh: $name FAILED (exit $rc) after $took; see $LOG_DIR/$name.log" >&2
    fi
done

echo "remeasure.sh: regenerating the docs' tables (python benchmarks/docs_tables.py)"
"$PYTHON" benchmarks/docs_tables.py || failed+=(docs_tables)
echo "remeasure.sh: done: ${done_ok[*]:-none}; failed: ${failed[*]:-none}; skipped: ${skipped[*]:-none}"
((${#failed[@]} == 0))
