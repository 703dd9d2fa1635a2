#!/usr/bin/env bash
# Sagan's pod bootstrap (SPEC §6.5): wraps a pod's container command on every backend.
#
#   1. clone or fetch $SAGAN_REPO_URL into $SAGAN_WORKDIR/repo and check out the commit/branch
#   2. post "5% · bootstrap complete on branch <branch>"
#   3. run $SAGAN_DOCKER_ARGS with `bash -lc`, stderr kept in a file (and still shown)
#   4. upload every file under $SAGAN_ARTIFACT_DIR, one by one
#   5. post the exit (with exitCode), write $SAGAN_POD_STATE_DIR/exit_code if set
#   6. stay alive $SAGAN_KEEP_ALIVE_MINUTES (default 10) so logs can be inspected
#
# Posts go to $SAGAN_PROGRESS_URL / $SAGAN_ARTIFACT_URL with the pod's bearer token, which
# is read from the environment by the posting process and never printed or put on a
# command line. Each progress post carries a `seq`, so a retried post is stored once.
set -u

WORKDIR=${SAGAN_WORKDIR:-.}
mkdir -p "$WORKDIR" && WORKDIR=$(cd "$WORKDIR" && pwd)
ARTIFACT_DIR=${SAGAN_ARTIFACT_DIR:-/workspace/sagan-artifacts}
KEEP_ALIVE_MINUTES=${SAGAN_KEEP_ALIVE_MINUTES:-10}
case $KEEP_ALIVE_MINUTES in ''|*[!0-9]*) KEEP_ALIVE_MINUTES=10 ;; esac
BRANCH=${SAGAN_GIT_BRANCH:-${SAGAN_EPS_BRANCH:-}}
COMMIT=${SAGAN_GIT_COMMIT:-${SAGAN_EPS_COMMIT_SHA:-}}
STDERR_FILE="$WORKDIR/sagan-stderr.log"
SEQ=0

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
    answer = exc.read(300).decode("utf-8", "replace").replace("\n", " ")
    print(f"sagan-bootstrap: {kind} post answered {exc.code}: {answer}", file=sys.stderr)
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
    local code
    code=$( { printf 'header = "Authorization: Bearer %s"\n' "${SAGAN_POD_PROGRESS_TOKEN:-}"
              [ -n "${4:-}" ] && printf 'header = "%s"\n' "$(curl_quote "$4")"; } |
            curl -sS -o /dev/null -w '%{http_code}' --max-time 30 -K - -X POST \
                 -H "Content-Type: $2" --data-binary "@$3" "$1") || return 1
    case $code in 2??) return 0 ;; 408|425|429|5??|000) return 1 ;; *) log "post answered $code"; return 2 ;; esac
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

# --- 1. repository ------------------------------------------------------------------
prepare_repo() {
    local repo=$WORKDIR/repo
    if [ -d "$repo/.git" ]; then
        git -C "$repo" fetch --quiet origin || return
    else
        git clone --quiet "$SAGAN_REPO_URL" "$repo" || return
    fi
    if [ -n "$COMMIT" ]; then
        git -C "$repo" cat-file -e "$COMMIT^{commit}" 2>/dev/null || git -C "$repo" fetch --quiet origin "$COMMIT"
        git -C "$repo" checkout --quiet --detach "$COMMIT" || return
    elif [ -n "$BRANCH" ]; then
        git -C "$repo" checkout --quiet -B "$BRANCH" "origin/$BRANCH" || return
    fi
}

: > "$STDERR_FILE"
RUN_DIR=$WORKDIR
rc=0
if [ -n "${SAGAN_REPO_URL:-}" ]; then
    { prepare_repo 2>&1 1>&3 3>&- | tee -a "$STDERR_FILE" >&2; } 3>&1
    rc=${PIPESTATUS[0]}
    RUN_DIR=$WORKDIR/repo
    if [ "$rc" -eq 0 ] && [ -z "$BRANCH" ]; then
        BRANCH=$(git -C "$RUN_DIR" rev-parse --abbrev-ref HEAD 2>/dev/null)
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

# --- 2, 3. run ----------------------------------------------------------------------
if [ "$rc" -eq 0 ]; then
    fetch_metrics_helper
    progress 5 "bootstrap complete on branch ${BRANCH:-(none)}" bootstrap
    mkdir -p "$ARTIFACT_DIR" 2>/dev/null
    cd "$RUN_DIR" || exit 1
    # stderr goes through tee into the file and back to stderr; stdout stays stdout.
    { bash -lc "${SAGAN_DOCKER_ARGS:-}" 2>&1 1>&3 3>&- | tee -a "$STDERR_FILE" >&2; } 3>&1
    rc=${PIPESTATUS[0]}
else
    log "could not prepare the repository (exit $rc)"
fi

# --- 4, 5. artifacts and exit -------------------------------------------------------
upload_artifacts
if [ "$rc" -eq 0 ]; then
    progress 100 "experiment finished" exit 0
else
    tail_text=$(tail -n 20 "$STDERR_FILE" 2>/dev/null)
    [ "${#tail_text}" -gt 1500 ] && tail_text=${tail_text: -1500}
    progress 0 "experiment exited with code $rc · err: $tail_text" exit "$rc"
fi
if [ -n "${SAGAN_POD_STATE_DIR:-}" ]; then
    echo "$rc" > "$SAGAN_POD_STATE_DIR/exit_code.tmp" && mv -f "$SAGAN_POD_STATE_DIR/exit_code.tmp" "$SAGAN_POD_STATE_DIR/exit_code"
fi

# --- 6. keep alive ------------------------------------------------------------------
if [ "$KEEP_ALIVE_MINUTES" != 0 ]; then
    log "exit $rc; staying alive ${KEEP_ALIVE_MINUTES} min for inspection"
    sleep $(( KEEP_ALIVE_MINUTES * 60 ))
fi
exit "$rc"
