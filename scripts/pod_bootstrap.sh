#!/usr/bin/env bash
# Sagan's pod bootstrap (SPEC §6.5): wraps a pod's container command on every backend.
#
#   0. a container restarted after its script finished (RunPod restarts exited containers)
#      finds the finished marker on the volume and only waits: the script never runs twice
#   1. clone or fetch $SAGAN_REPO_URL into $SAGAN_WORKDIR/<repository name> ($SAGAN_REPO_DIR),
#      with a deploy token (GIT_ASKPASS) or SSH key (GIT_SSH_COMMAND) read from the variable
#      named by SAGAN_REPO_TOKEN_ENV / SAGAN_REPO_SSH_KEY_ENV, then check out the commit/branch
#   2. set up the project's environment: uv.lock / pyproject.toml → uv sync (uv installed with
#      pip if missing), requirements.txt → pip install -r; a failure posts "setup failed: …"
#   3. post "5% · bootstrap complete on branch <branch>", run $SAGAN_DOCKER_ARGS with
#      `bash -lc` in the checkout, stderr kept in a file (and still shown); beside it, the
#      metrics helper samples GPU (nvidia-smi), CPU, RAM and disk every
#      $SAGAN_SYSTEM_METRICS_SECONDS (30; 0: off) and posts them as sys/… metrics
#   4. upload every file under $SAGAN_ARTIFACT_DIR and the declared $SAGAN_ARTIFACT_PATHS
#      (globs relative to the checkout), then the last 1 MB of the pod's log, redacted
#   5. post the exit (with exitCode), write $SAGAN_POD_STATE_DIR/exit_code if set, and the
#      finished marker on the volume
#   6. wait until Sagan stops the pod at the end of keep-alive (SAGAN_KEEP_ALIVE_MINUTES;
#      0: exit at once) — never exit by itself, or RunPod would start the container again
#
# Posts go to $SAGAN_PROGRESS_URL / $SAGAN_ARTIFACT_URL with the pod's bearer token, which
# is read from the environment by the posting process and never printed or put on a
# command line. Each progress post carries a `seq`, so a retried post is stored once.
# The full stdout/stderr is kept on the volume in $SAGAN_WORKDIR/.sagan/logs/.
set -u
unset SAGAN_BOOTSTRAP_B64  # RunPod's copy of this script: nothing after this line needs it

WORKDIR=${SAGAN_WORKDIR:-.}
mkdir -p "$WORKDIR" && WORKDIR=$(cd "$WORKDIR" && pwd)
ARTIFACT_DIR=${SAGAN_ARTIFACT_DIR:-/workspace/sagan-artifacts}
KEEP_ALIVE_MINUTES=${SAGAN_KEEP_ALIVE_MINUTES:-10}
case $KEEP_ALIVE_MINUTES in ''|*[!0-9]*) KEEP_ALIVE_MINUTES=10 ;; esac
BRANCH=${SAGAN_GIT_BRANCH:-${SAGAN_EPS_BRANCH:-}}
COMMIT=${SAGAN_GIT_COMMIT:-${SAGAN_EPS_COMMIT_SHA:-}}
SAGAN_DIR="$WORKDIR/.sagan"
POD_NAME=${SAGAN_POD_NAME:-pod}
POD_NAME=${POD_NAME//[^A-Za-z0-9._-]/_}
STDERR_FILE="$SAGAN_DIR/stderr-$POD_NAME.log"
LOG_FILE="$SAGAN_DIR/logs/$POD_NAME.log"
FINISHED_MARKER="$SAGAN_DIR/finished-$POD_NAME"
LOG_UPLOAD_BYTES=${SAGAN_LOG_UPLOAD_BYTES:-1048576}
SEQ=0
mkdir -p "$SAGAN_DIR/logs"

log() { echo "sagan-bootstrap: $*" >&2; }

# --- posting ------------------------------------------------------------------------
# One POST with python3's urllib. Exit 0: stored; 1: worth retrying; 2: refused for good.
read -r -d '' POST_PY <<'PY'
import json, os, sys, urllib.error, urllib.parse, urllib.request
kind = sys.argv[1]
headers = {"Authorization": "Bearer " + os.environ.get("SAGAN_POD_PROGRESS_TOKEN", ""),
           "User-Agent": "sagan-pod-bootstrap"}
if kind == "progress":
    pct, message, milestone, seq, exit_code = sys.argv[2:7]
    body = {"progressPct": int(pct), "message": message[:2000], "seq": int(seq)}
    if milestone:
        body["milestone"] = milestone
    if exit_code != "":
        body["exitCode"] = int(exit_code)
    url, data = os.environ["SAGAN_PROGRESS_URL"], json.dumps(body).encode()
    headers["Content-Type"] = "application/json"
else:
    path, name, content_type = sys.argv[2:5]
    with open(path, "rb") as handle:
        data = handle.read()
    url = os.environ["SAGAN_ARTIFACT_URL"]
    headers["Content-Type"] = content_type
    # Printable ASCII goes as is; anything else (and "%") is percent-encoded UTF-8.
    headers["X-Sagan-Artifact-Name"] = urllib.parse.quote(name, safe="".join(
        chr(c) for c in range(0x20, 0x7f) if chr(c) != "%"))
try:
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers, method="POST"),
                                timeout=30):
        sys.exit(0)
except urllib.error.HTTPError as exc:
    answer = exc.read(4000).decode("utf-8", "replace")
    try:  # Sagan's refusals are JSON with a sentence saying why (a 413 names the budget passed)
        answer = json.loads(answer).get("message") or answer
    except (ValueError, AttributeError):
        pass
    print(f"sagan-bootstrap: {kind} post answered {exc.code}: {answer.replace(chr(10), ' ')[:600]}", file=sys.stderr)
    sys.exit(1 if exc.code in (408, 425, 429) or exc.code >= 500 else 2)
except Exception as exc:  # connection refused, timeout, DNS: try again
    print(f"sagan-bootstrap: {kind} post failed: {exc.__class__.__name__}: {exc}", file=sys.stderr)
    sys.exit(1)
PY

json_string() {  # a bash string as a JSON string, for the curl fallback
    local s=$1
    s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}; s=${s//$'\n'/\\n}
    printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\037')"
}

curl_quote() { local s=${1//\\/\\\\}; printf '%s' "${s//\"/\\\"}"; }

curl_post() {  # curl_post <url> <content-type> <body-file> [extra header]; token via stdin config
    local code answer rc
    answer=$(mktemp) || return 1
    code=$( { printf 'header = "Authorization: Bearer %s"\n' "${SAGAN_POD_PROGRESS_TOKEN:-}"
              [ -n "${4:-}" ] && printf 'header = "%s"\n' "$(curl_quote "$4")"; } |
            curl -sS -o "$answer" -w '%{http_code}' --max-time 30 -K - -X POST \
                 -H "Content-Type: $2" --data-binary "@$3" "$1") || { rm -f "$answer"; return 1; }
    case $code in
        2??) rc=0 ;; 408|425|429|5??|000) rc=1 ;;
        # Sagan's refusal says why (a 413 names the budget passed): its JSON, one line.
        *) log "post answered $code: $(head -c 600 "$answer" | tr -d '\000-\037')"; rc=2 ;;
    esac
    rm -f "$answer"
    return "$rc"
}

send() {  # send progress|artifact <args…>, retried with back-off while worth retrying
    local attempt rc tool=${SAGAN_BOOTSTRAP_HTTP:-}
    if [ -z "$tool" ]; then
        if command -v python3 >/dev/null 2>&1; then tool=python3; elif command -v curl >/dev/null 2>&1; then tool=curl; fi
    fi
    for attempt in 1 2 3 4 5; do
        case $tool in
            python3) python3 -c "$POST_PY" "$@"; rc=$? ;;
            curl) curl_send "$@"; rc=$? ;;
            *) log "neither python3 nor curl is installed; cannot post $1"; return 2 ;;
        esac
        [ "$rc" -ne 1 ] && return "$rc"
        [ "$attempt" -lt 5 ] && sleep $(( ${SAGAN_POST_RETRY_SECONDS:-2} * attempt ))
    done
    return 1
}

curl_send() {
    local body rc
    body=$(mktemp) || return 1
    if [ "$1" = progress ]; then
        { printf '{"progressPct": %d, "message": %s, "seq": %d' "$2" "$(json_string "${3:0:2000}")" "$5"
          [ -n "$4" ] && printf ', "milestone": %s' "$(json_string "$4")"
          [ -n "$6" ] && printf ', "exitCode": %d' "$6"
          printf '}'; } > "$body"
        curl_post "$SAGAN_PROGRESS_URL" application/json "$body"; rc=$?
    else
        cp "$2" "$body" && curl_post "$SAGAN_ARTIFACT_URL" "$4" "$body" "X-Sagan-Artifact-Name: $3"; rc=$?
    fi
    rm -f "$body"
    return "$rc"
}

progress() {  # progress <pct> <message> [milestone] [exit code]
    SEQ=$((SEQ + 1))
    if [ -z "${SAGAN_PROGRESS_URL:-}" ]; then log "no SAGAN_PROGRESS_URL; not posting: $1% · $2"; return 0; fi
    send progress "$1" "$2" "${3:-}" "$SEQ" "${4:-}" || log "could not post progress: $1% · $2"
}

content_type() {
    case ${1,,} in
        *.json) echo application/json ;;       *.csv) echo text/csv ;;
        *.tsv) echo text/tab-separated-values ;; *.txt|*.log) echo text/plain ;;
        *.svg) echo image/svg+xml ;;           *.png) echo image/png ;;
        *.jpg|*.jpeg) echo image/jpeg ;;        *.html|*.htm) echo text/html ;;
        *.md) echo text/markdown ;;            *) echo application/octet-stream ;;
    esac
}

upload_artifacts() {  # every regular file under $ARTIFACT_DIR (symlinks are not followed)
    local file name sent=0 failed=0
    [ -d "$ARTIFACT_DIR" ] || { log "no artifact directory $ARTIFACT_DIR"; return 0; }
    if [ -z "${SAGAN_ARTIFACT_URL:-}" ]; then log "no SAGAN_ARTIFACT_URL; not uploading"; return 0; fi
    while IFS= read -r -d '' file; do
        name=${file#"$ARTIFACT_DIR"/}
        if send artifact "$file" "$name" "$(content_type "$name")"; then sent=$((sent + 1))
        else failed=$((failed + 1)); log "could not upload $name"; fi
    done < <(find "$ARTIFACT_DIR" -type f -print0 | sort -z)
    log "uploaded $sent artifact(s), $failed failed"
}

# --- 0. keep the whole log on the volume ---------------------------------------------
keep_log() {  # everything from here on also goes to $LOG_FILE (appended across restarts)
    exec > >(tee -a "$LOG_FILE") 2> >(tee -a "$LOG_FILE" >&2)
}

# --- 1. repository ------------------------------------------------------------------
repo_name() {  # the checkout's folder: SAGAN_REPO_NAME, else the URL's last component
    local name=${SAGAN_REPO_NAME:-}
    if [ -z "$name" ]; then name=${SAGAN_REPO_URL%/}; name=${name##*/}; name=${name##*:}; name=${name%.git}; fi
    name=${name//[^A-Za-z0-9._-]/_}
    case $name in ''|.|..|.sagan) name=repo ;; esac
    printf '%s' "$name"
}

repo_credentials() {  # git learns the deploy token or key by the variable's name, never its value
    CREDENTIAL_FILES=()
    if [ -n "${SAGAN_REPO_TOKEN_ENV:-}" ] && [ -n "$(printenv "$SAGAN_REPO_TOKEN_ENV")" ]; then
        local askpass
        askpass=$(mktemp "${TMPDIR:-/tmp}/sagan-askpass.XXXXXX") || return 1
        # The helper holds only the variable's name; git runs it and it prints the value.
        printf '#!/bin/sh\ncase "$1" in Username*) echo "${SAGAN_REPO_TOKEN_USER:-x-access-token}" ;; *) printenv %s ;; esac\n' \
            "$SAGAN_REPO_TOKEN_ENV" > "$askpass"
        chmod 700 "$askpass"
        CREDENTIAL_FILES+=("$askpass")
        export GIT_ASKPASS=$askpass GIT_TERMINAL_PROMPT=0
    fi
    if [ -n "${SAGAN_REPO_SSH_KEY_ENV:-}" ] && [ -n "$(printenv "$SAGAN_REPO_SSH_KEY_ENV")" ]; then
        local key
        key=$(mktemp "${TMPDIR:-/tmp}/sagan-key.XXXXXX") || return 1
        chmod 600 "$key"
        printf '%s\n' "$(printenv "$SAGAN_REPO_SSH_KEY_ENV")" > "$key"
        CREDENTIAL_FILES+=("$key")
        export GIT_SSH_COMMAND="ssh -i $key -o IdentitiesOnly=yes -o StrictHostKeyChecking=accept-new -o BatchMode=yes"
    fi
}

forget_credentials() {  # after the clone: the experiment's own command never sees them
    local file
    for file in "${CREDENTIAL_FILES[@]}"; do rm -f "$file"; done
    [ -n "${SAGAN_REPO_TOKEN_ENV:-}" ] && unset "$SAGAN_REPO_TOKEN_ENV"
    [ -n "${SAGAN_REPO_SSH_KEY_ENV:-}" ] && unset "$SAGAN_REPO_SSH_KEY_ENV"
    unset GIT_ASKPASS GIT_SSH_COMMAND
}

git_() {  # no stored credential helper; the origin may belong to another user of this host
    # safe.directory counts only in protected (global) config, which reaches git-upload-pack too.
    if [ ! -f "$SAGAN_DIR/gitconfig" ]; then printf '[safe]\n\tdirectory = *\n' > "$SAGAN_DIR/gitconfig"; fi
    GIT_CONFIG_GLOBAL="$SAGAN_DIR/gitconfig" git -c credential.helper= "$@"
}

prepare_repo() {
    local repo=$REPO_DIR
    if [ -d "$repo/.git" ]; then
        git_ -C "$repo" fetch --quiet origin || return
    else
        git_ clone --quiet "$SAGAN_REPO_URL" "$repo" || return
    fi
    if [ -n "$COMMIT" ]; then
        git_ -C "$repo" cat-file -e "$COMMIT^{commit}" 2>/dev/null || git_ -C "$repo" fetch --quiet origin "$COMMIT"
        git_ -C "$repo" checkout --quiet --detach "$COMMIT" || return
    elif [ -n "$BRANCH" ]; then
        git_ -C "$repo" checkout --quiet -B "$BRANCH" "origin/$BRANCH" || return
    fi
}

# --- 2. the project's environment --------------------------------------------------
SETUP_LOG="$SAGAN_DIR/setup-$POD_NAME.log"

ensure_uv() {  # uv from PyPI with pip, into a venv on the volume (kept across restarts)
    command -v uv >/dev/null 2>&1 && return 0
    if [ ! -x "$SAGAN_DIR/tools/bin/uv" ]; then
        python3 -m venv "$SAGAN_DIR/tools" && "$SAGAN_DIR/tools/bin/pip" install --quiet uv || return
    fi
    export PATH="$SAGAN_DIR/tools/bin:$PATH"
}

setup_environment() {  # in the checkout; output to $SETUP_LOG; returns the failing step's status
    SETUP_STEP=""
    [ -n "${SAGAN_SKIP_SETUP:-}" ] && return 0
    if [ -f uv.lock ] || [ -f pyproject.toml ]; then
        SETUP_STEP="installing uv"; ensure_uv >>"$SETUP_LOG" 2>&1 || return
        export UV_CACHE_DIR=${UV_CACHE_DIR:-$SAGAN_DIR/uv-cache}
        export UV_PYTHON=${UV_PYTHON:-$(command -v python3)}
        SETUP_STEP="uv sync"; uv sync >>"$SETUP_LOG" 2>&1 || return
    elif [ -f requirements.txt ]; then
        SETUP_STEP="pip install -r requirements.txt"
        python3 -m pip install --quiet -r requirements.txt >>"$SETUP_LOG" 2>&1 || return
    fi
    SETUP_STEP=""
}

# --- 4. artifacts declared by the spec, and the log ----------------------------------
upload_declared() {  # $SAGAN_ARTIFACT_PATHS: one glob a line, relative to the checkout (or /workspace/…)
    local pattern file name sent=0
    [ -n "${SAGAN_ARTIFACT_PATHS:-}" ] && [ -n "${SAGAN_ARTIFACT_URL:-}" ] || return 0
    shopt -s nullglob globstar
    while IFS= read -r pattern; do
        [ -n "$pattern" ] || continue
        case $pattern in /workspace/*) pattern=$WORKDIR/${pattern#/workspace/} ;; /*) ;; *) pattern=$RUN_DIR/$pattern ;; esac
        case $pattern in */) pattern=${pattern}** ;; esac
        for file in $pattern; do
            [ -f "$file" ] && [ ! -L "$file" ] || continue
            case $file in "$ARTIFACT_DIR"/*) continue ;; esac  # already uploaded with the folder
            case $file in "$RUN_DIR"/*) name=${file#"$RUN_DIR"/} ;; "$WORKDIR"/*) name=${file#"$WORKDIR"/} ;; *) name=${file##*/} ;; esac
            if send artifact "$file" "$name" "$(content_type "$name")"; then sent=$((sent + 1))
            else log "could not upload $name"; fi
        done
    done <<< "$SAGAN_ARTIFACT_PATHS"
    shopt -u nullglob globstar
    log "uploaded $sent declared artifact(s)"
}

read -r -d '' REDACT_PY <<'PY'
import os, sys
names = ["SAGAN_POD_PROGRESS_TOKEN"] + [n for n in os.environ.get("SAGAN_SECRET_NAMES", "").split(",") if n]
data = open(sys.argv[1], "rb").read()
for name in names:
    value = os.environ.get(name, "")
    if len(value) >= 6:
        data = data.replace(value.encode(), b"[REDACTED:" + name.encode() + b"]")
sys.stdout.buffer.write(data)
PY

upload_log() {  # the last 1 MB of the pod's log, with the pod's secret values blanked out
    local cut redacted
    [ -f "$LOG_FILE" ] && [ -n "${SAGAN_ARTIFACT_URL:-}" ] || return 0
    cut=$(mktemp) && redacted=$(mktemp) || return 0
    tail -c "$LOG_UPLOAD_BYTES" "$LOG_FILE" > "$cut"
    if command -v python3 >/dev/null 2>&1; then python3 -c "$REDACT_PY" "$cut" > "$redacted"
    else cp "$cut" "$redacted"; fi  # the server redacts text artifacts too
    send artifact "$redacted" "sagan-logs/$POD_NAME.log" text/plain || log "could not upload the log"
    rm -f "$cut" "$redacted"
}

# --- 6. waiting to be stopped --------------------------------------------------------
wait_to_be_stopped() {
    if [ "$KEEP_ALIVE_MINUTES" = 0 ]; then exit "$1"; fi
    log "exit $1; waiting for Sagan to stop this pod after ${KEEP_ALIVE_MINUTES} min of keep-alive"
    while :; do sleep 3600 & wait $!; done
}

finish() {  # finish <rc> <message>: post the exit, mark it on the volume, wait
    local rc=$1
    if [ "$rc" -eq 0 ]; then progress 100 "experiment finished" exit 0
    else progress 0 "$2" "${3:-exit}" "$rc"; fi
    if [ -n "${SAGAN_POD_STATE_DIR:-}" ]; then
        echo "$rc" > "$SAGAN_POD_STATE_DIR/exit_code.tmp" && mv -f "$SAGAN_POD_STATE_DIR/exit_code.tmp" "$SAGAN_POD_STATE_DIR/exit_code"
    fi
    echo "$rc" > "$FINISHED_MARKER"
    wait_to_be_stopped "$rc"
}

stderr_tail() {
    local text
    text=$(tail -n 20 "$1" 2>/dev/null)
    [ "${#text}" -gt 1500 ] && text=${text: -1500}
    printf '%s' "$text"
}

# --- the run ------------------------------------------------------------------------
if [ -f "$FINISHED_MARKER" ]; then
    rc=$(cat "$FINISHED_MARKER" 2>/dev/null); case $rc in ''|*[!0-9]*) rc=1 ;; esac
    log "this pod's script already finished (exit $rc); the container was restarted; not running it again"
    progress "$([ "$rc" -eq 0 ] && echo 100 || echo 0)" "container restarted after the script finished (exit $rc); not running it again"
    wait_to_be_stopped "$rc"
fi
keep_log
: > "$STDERR_FILE"
REPO_DIR=$WORKDIR/$( [ -n "${SAGAN_REPO_URL:-}" ] && repo_name || echo repo )
export SAGAN_REPO_DIR=$REPO_DIR
RUN_DIR=$WORKDIR
rc=0
if [ -n "${SAGAN_REPO_URL:-}" ]; then
    repo_credentials
    { prepare_repo 2>&1 1>&3 3>&- | tee -a "$STDERR_FILE" >&2; } 3>&1
    rc=${PIPESTATUS[0]}
    forget_credentials
    RUN_DIR=$REPO_DIR
    if [ "$rc" -eq 0 ] && [ -z "$BRANCH" ]; then
        BRANCH=$(git_ -C "$RUN_DIR" rev-parse --abbrev-ref HEAD 2>/dev/null)
        [ "$BRANCH" = HEAD ] && BRANCH=${COMMIT:0:12}
    fi
fi
case $ARTIFACT_DIR in /*) ;; *) ARTIFACT_DIR=$RUN_DIR/$ARTIFACT_DIR ;; esac
# --- metrics helper: the training script can `import sagan_metrics` (docs/metrics.md) ---
fetch_metrics_helper() {
    local dir=$WORKDIR/sagan-lib
    { [ -n "${SAGAN_PROGRESS_URL:-}" ] && command -v python3 >/dev/null 2>&1; } || return 0
    mkdir -p "$dir" && python3 - "${SAGAN_PROGRESS_URL%/progress}/metrics/helper.py" "$dir/sagan_metrics.py" <<'PY' \
        || { log "could not fetch the metrics helper"; return 0; }
import os, sys, urllib.request
request = urllib.request.Request(sys.argv[1], headers={
    "Authorization": "Bearer " + os.environ.get("SAGAN_POD_PROGRESS_TOKEN", "")})
with urllib.request.urlopen(request, timeout=30) as answer, open(sys.argv[2] + ".tmp", "wb") as out:
    out.write(answer.read())
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
PY
    export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
}

# --- system metrics beside the run: GPU (nvidia-smi), CPU, RAM, disk as sys/… metrics ---
SYSTEM_METRICS_PID=
start_system_metrics() {  # every SAGAN_SYSTEM_METRICS_SECONDS (30; 0: off) while the script runs
    local every=${SAGAN_SYSTEM_METRICS_SECONDS:-30}
    case $every in ''|*[!0-9]*) every=30 ;; esac
    [ "$every" -gt 0 ] && [ -f "$WORKDIR/sagan-lib/sagan_metrics.py" ] || return 0
    python3 "$WORKDIR/sagan-lib/sagan_metrics.py" --system "$every" "$WORKDIR" &
    SYSTEM_METRICS_PID=$!
}
stop_system_metrics() {
    [ -n "$SYSTEM_METRICS_PID" ] || return 0
    kill "$SYSTEM_METRICS_PID" 2>/dev/null
    wait "$SYSTEM_METRICS_PID" 2>/dev/null
    SYSTEM_METRICS_PID=
}

if [ "$rc" -ne 0 ]; then
    log "could not prepare the repository (exit $rc)"
    upload_log
    finish "$rc" "setup failed: could not clone or check out the repository · err: $(stderr_tail "$STDERR_FILE")" setup_failed
fi
cd "$RUN_DIR" || exit 1
setup_environment; rc=$?
if [ "$rc" -ne 0 ]; then
    log "setup failed: $SETUP_STEP (exit $rc)"
    cat "$SETUP_LOG" >&2 2>/dev/null
    upload_log
    finish "$rc" "setup failed: $SETUP_STEP · err: $(stderr_tail "$SETUP_LOG")" setup_failed
fi

# --- 3. run -------------------------------------------------------------------------
fetch_metrics_helper
progress 5 "bootstrap complete on branch ${BRANCH:-(none)}" bootstrap
mkdir -p "$ARTIFACT_DIR" 2>/dev/null
start_system_metrics
# stderr goes through tee into the file and back to stderr; stdout stays stdout.
{ bash -lc "${SAGAN_DOCKER_ARGS:-}" 2>&1 1>&3 3>&- | tee -a "$STDERR_FILE" >&2; } 3>&1
rc=${PIPESTATUS[0]}
stop_system_metrics

# --- 4, 5. artifacts and exit -------------------------------------------------------
upload_artifacts
upload_declared
upload_log
finish "$rc" "experiment exited with code $rc · err: $(stderr_tail "$STDERR_FILE")"
