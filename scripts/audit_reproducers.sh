#!/bin/bash
# audit_reproducers.sh COMMIT OUTDIR -- rerun the reliability-5 audit's reproducers at COMMIT.
#
# Builds the audit's layout in a temporary folder T (removed at the end; KEEP=1 keeps it):
#   T/rel5/selfcal  a detached git worktree of this repository at COMMIT, with .venv
#   T/rel5/scripts  copies of the audit scripts ($AUDIT), plus fuzzgen.py (reconstructed below)
#   T/rel5/work     the reproducers' work folders
# then, from T, runs repro_sets.sh, repro_bbq_save_load.py, repro_model_conformal.sh,
# compare_kill.py (KILLS kills) and sets_attack.py (the cases in $CASES) one after another, each
# under `timeout` and `prlimit --as=6000000000` (the audit's cap) and `/usr/bin/time -f %M`
# (peak RSS in kB of the largest process of the tree); each one's output goes to
# OUTDIR/<name>.txt, its exit code, seconds and peak RSS to OUTDIR/<name>.rc; also
# compare_kill.json, compare_kill/*.README.md, sets_attack.jsonl and reports/ (each report
# written) in OUTDIR.
#
# The venv, offline: `python -m venv --without-pip` from the interpreter $BASE_VENV was made
# with, then the packages of $BASE_VENV (default /work/main/.venv: torch 2.13.0+cpu and the
# [test] extras the audit had, probmetrics included) hard-linked in (`cp -al`, same file
# system; a copy otherwise), without selfcal's own editable install; then `pip install
# --no-deps -e` of the worktree, its build backend (hatchling) taken from this machine's local
# index file:///opt/pypi/simple (override PIP_INDEX_URL). No network; ~10 s. The venv holds its
# own files: it does not read $BASE_VENV once made. (Not --system-site-packages: no
# interpreter here has torch outside a venv, and a venv made from a venv does not see its
# packages.)
#
# The audit's scripts name their files `./rel5/...` and some `cd` into rel5/work first, so
# the copies have `./rel5/` replaced by the absolute T/rel5/ (sed); nothing else is changed.
#
# Usage: scripts/audit_reproducers.sh COMMIT OUTDIR   (e.g. b2351bf out/before; ~10 min)
# Env: AUDIT, BASE_VENV, KILLS (8), SETS_TIMEOUT (60 s a command), CASES and SLOW_CASES (of
# sets_attack.py; SLOW_CASES get 300 s a command), KEEP=1 (keep T).
set -u
[ $# -eq 2 ] || { sed -n 2,3p "$0"; sed -n '/^# Usage/,/^# Env/p' "$0"; exit 2; }
COMMIT=$1; OUT=$(realpath -m "$2"); mkdir -p "$OUT"
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
AUDIT=${AUDIT:-/work/shared/reference/audits/reliability-5}
BASE_VENV=${BASE_VENV:-/work/main/.venv}
export SETS_TIMEOUT=${SETS_TIMEOUT:-60} PIP_INDEX_URL=${PIP_INDEX_URL:-file:///opt/pypi/simple}
CASES=${CASES:-control-valid symlink-val-to-dev-zero symlink-onefile-to-dev-zero val.npz-is-a-fifo
  zip-bomb-real-6.4GB zip-declared-1e12-rows zip-declared-4e8x2-rows symlink-set-folder-outside
  symlink-onefile-outside symlink-val-to-outside symlink-val-to-etc-passwd object-array-logits
  all-one-label-val logits-huge-1e300 single-row one-class logits-int logits-float16
  duplicate-set-names-folder-and-file set-name-with-markdown-and-newline
  one-good-one-bad zero-rows labels-float-1.5 groups-wrong-length empty-val.npz-0-bytes
  unreadable-val.npz-as-nobody}
SLOW_CASES=${SLOW_CASES:-100000-classes-2-rows}  # posthoc takes ~90 s at c266a85: 300 s each
T=$(mktemp -d /tmp/selfcal-audit.XXXXXX); R=$T/rel5
cleanup() { [ "${KEEP:-0}" = 1 ] && { echo "kept $T"; return; }; rm -rf "$T"; git -C "$REPO" worktree prune; }
trap cleanup EXIT
t0=$(date +%s)
git -C "$REPO" worktree add -q --detach "$R/selfcal" "$COMMIT" || exit 1
echo "commit $(git -C "$R/selfcal" rev-parse HEAD)" | tee "$OUT/commit.txt"
# --- the venv (see the header)
PYBASE=$(sed -n 's/^home = //p' "$BASE_VENV/pyvenv.cfg")/python3
"$PYBASE" -m venv --without-pip "$R/selfcal/.venv" || exit 1
SP=$(echo "$R"/selfcal/.venv/lib/python3*/site-packages)
for f in "$BASE_VENV"/lib/python3*/site-packages/*; do
  case ${f##*/} in _editable_impl_selfcal.pth|selfcal-*.dist-info|__editable__*selfcal*) ;;
    *) cp -al "$f" "$SP/" 2>/dev/null || cp -a "$f" "$SP/" ;; esac
done
"$R/selfcal/.venv/bin/python" -m pip install -q --no-deps -e "$R/selfcal" || exit 1
PY=$R/selfcal/.venv/bin/python S=$R/selfcal/.venv/bin/selfcal
# --- the audit scripts, ./rel5/ made absolute
mkdir -p "$R/scripts" "$R/work"
for f in "$AUDIT"/*.py "$AUDIT"/*.sh; do sed "s#\./rel5/#$R/#g" "$f" > "$R/scripts/${f##*/}"; done
# fuzzgen.py is not in the audit folder: rebuilt from the generator reliability-4.md describes
# (one RNG per case seeded with 'seed'; logits standard normal x scale, or integers -2..2 for
# 'ties'; labels 'argmax' = argmax of the logits, 'uniform' = integers 0..c-1 drawn after the
# logits; 'probs' = the float64 softmax, then cast to 'dtype'). Only what the BBQ cases use.
cat > "$R/scripts/fuzzgen.py" <<'PYEOF'
import numpy as np
SCALE = {"normal": 1.0, "sharp": 10.0, "large": 1e4, "huge": 1e30}
def raw(case, rows_offset=0):
    rng = np.random.default_rng(case["seed"] + rows_offset)
    n, c = case["n"], case["c"]
    if case["scenario"] == "ties":
        z = rng.integers(-2, 3, size=(n, c)).astype(np.float64)
    else:
        z = rng.standard_normal((n, c)) * SCALE[case["scenario"]]
    y = {"argmax": lambda: z.argmax(1), "uniform": lambda: rng.integers(0, c, n)}[case["labels"]]()
    return z, y.astype(np.int64)
def scores_of(case, z):
    if case["kind"] == "logits":
        return z
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
def present(case, s, y):
    assert case["container"] == "numpy" and case["layout"] == "c"
    return np.ascontiguousarray(s.astype(case["dtype"])), y
PYEOF
# --- setup: compare_kill's sets_new/ and sets_old/ (three 5-class sets a, b, c of 300 + 300
# rows, same names, other data), repro_model_conformal's bc/ and model/ (its header's commands)
"$PY" - "$R/work/kill" <<'PYEOF'
import sys, pathlib, numpy as np
for kind, base in (("sets_new", 0), ("sets_old", 100)):
    for i, name in enumerate("abc"):
        d = pathlib.Path(sys.argv[1], kind, name); d.mkdir(parents=True)
        for split in ("val", "test"):
            r = np.random.default_rng(base + 10 * i + (split == "test"))
            z = r.standard_normal((300, 5)) * 3
            p = np.exp(z - z.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
            np.savez(d / f"{split}.npz", logits=z, labels=(p.cumsum(1) > r.random((300, 1))).argmax(1))
PYEOF
mkdir -p "$R/work/train"
( cd "$R/work/train" && "$S" dataset breast-cancer --out bc >/dev/null &&
  "$S" train bc/train.csv --val bc/val.csv --out model --conformal-split 0.25 >/dev/null ) ||
  echo "setup of work/train failed" | tee "$OUT/setup-error.txt"
echo "setup done in $(( $(date +%s) - t0 )) s"
# --- the reproducers, from T
cd "$T"
run() {  # run NAME TIMEOUT CMD...: output to OUT/NAME.txt, "exit RC, S s, peak RSS KB kB" to OUT/NAME.rc
  local name=$1 lim=$2 s=$(date +%s); shift 2
  /usr/bin/time -o "$OUT/$name.rss" -f %M timeout "$lim" prlimit --as=6000000000 "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "exit $rc, $(( $(date +%s) - s )) s, peak RSS $(tail -1 "$OUT/$name.rss") kB" | tee "$OUT/$name.rc"
  rm -f "$OUT/$name.rss"; echo "  ^ $name"
}
run repro_sets 600 bash rel5/scripts/repro_sets.sh
run repro_bbq_save_load 120 "$PY" rel5/scripts/repro_bbq_save_load.py
run repro_model_conformal 300 bash rel5/scripts/repro_model_conformal.sh
run compare_kill 600 "$PY" rel5/scripts/compare_kill.py rel5/work/kill "${KILLS:-8}" 0
mkdir -p "$OUT/compare_kill"; cp rel5/work/kill/compare_kill.json "$OUT/"
for d in rel5/work/kill/*/; do d=${d%/}; cp "$d/README.md" "$OUT/compare_kill/${d##*/}.README.md" 2>/dev/null; done
# sets_attack.py links outside/ by the path it is given: an absolute one, as the audit did
"$PY" rel5/scripts/sets_attack.py build "$R/work" > "$OUT/sets_attack_build.txt" 2>&1
# shellcheck disable=SC2086
run sets_attack 900 "$PY" rel5/scripts/sets_attack.py run "$R/work" $CASES
# shellcheck disable=SC2086
SETS_TIMEOUT=300 run sets_attack_slow 960 "$PY" rel5/scripts/sets_attack.py run "$R/work" $SLOW_CASES
cp rel5/work/sets_attack.jsonl "$OUT/"
# the reports written (what the symlink, duplicate-name and Markdown-name cases show)
mkdir -p "$OUT/reports"
for f in rel5/work/runs/*/*/README.md rel5/work/repro_sets/o*/README.md; do
  g=${f%/README.md}; cp "$f" "$OUT/reports/$(basename "$(dirname "$g")").$(basename "$g").md"; done
echo "total $(( $(date +%s) - t0 )) s" | tee "$OUT/total.txt"
