#!/usr/bin/env bash
# Checks that the repository paths named in the documentation exist.
#
# Usage: scripts/check-doc-paths.sh        (from anywhere inside the checkout)
#
# Scope: every Markdown file of the checkout (tracked, or new and not ignored) and the doc
# comments (`//!` and `///` lines) of its Rust files. A token counts as a path when it contains
# a slash and starts with one of the repository's top-level directories (computed from
# `git ls-files` at run time, so new crates are covered without editing this script), or when it
# is one of the repository's top-level file names (Makefile, Cargo.toml, CHANGELOG.md, ...).
# Markdown link targets (`[text](target)`) are checked relative to the file that holds them.
#
# A path is found when it names a file or directory of the checkout, relative to the repository
# root, to the file's own directory or to one of that directory's parents (so a crate's doc
# comment may say `tests/kit/main.rs` for its own tests). Trailing punctuation, backticks,
# `:line` suffixes and `#anchor`s are dropped; `*` globs must match something; one `{a,b}` brace
# list is expanded. URLs, absolute paths, build outputs (target/, .venv/) and placeholders in
# capitals (`plugins/NAME/README.md`) are ignored.
#
# Any reference to the shared reference notes outside the checkout is an error: the project must
# not point outside its own repository.
#
# Prints `FILE:LINE: missing PATH` for each path not found, then a summary line, and exits 1 when
# anything was missing. No network, no build; only git, grep, sed and awk.
set -euo pipefail

cd "$(git rev-parse --show-toplevel)"

# Every file of the checkout as it is now: tracked or new (not ignored), less what was deleted
# from the working tree but not yet from the index.
files_now() {
    {
        git ls-files --deleted | sed 's/^/D /'
        git ls-files --cached --others --exclude-standard | sed 's/^/F /'
    } | awk '$1 == "D" { gone[substr($0, 3)] = 1; next }
             !(substr($0, 3) in gone) && !seen[substr($0, 3)]++ { print substr($0, 3) }'
}

listing=$(mktemp)
trap 'rm -f "$listing"' EXIT
files_now >"$listing"

# The scanned lines, as FILE<TAB>LINE<TAB>KIND<TAB>TEXT (KIND: md or rs).
scan() {
    grep '\.md$' "$listing" | while IFS= read -r f; do
        [ -f "$f" ] && grep -n '' "$f" | sed "s|^\([0-9]*\):|$f\t\1\tmd\t|" || true
    done
    grep '\.rs$' "$listing" | while IFS= read -r f; do
        [ -f "$f" ] && grep -n '^[[:space:]]*//[/!]' "$f" | sed "s|^\([0-9]*\):|$f\t\1\trs\t|" || true
    done
}

scan | awk -F '\t' -v listing="$listing" '
function add_known(p,    parts, n, i, d) {
    known[p] = 1
    n = split(p, parts, "/")
    d = parts[1]
    for (i = 2; i <= n; i++) { dirs[d] = 1; d = d "/" parts[i] }
    if (n > 1) top_dirs[parts[1]] = 1; else top_files[p] = 1
}
function exists(p,    re, k) {
    sub(/\/+$/, "", p)
    if (p == "" || p == ".") return 1
    if ((p in known) || (p in dirs)) return 1
    if (index(p, "*") == 0) return 0
    re = p
    gsub(/[.+?()|^$\[\]]/, "\\\\&", re)
    gsub(/\*/, "[^/]*", re)
    re = "^" re "$"
    for (k in known) if (k ~ re) return 1
    for (k in dirs) if (k ~ re) return 1
    return 0
}
# Normalises a/b/../c and ./a; returns "" when the path climbs above the root.
function normal(p,    parts, n, i, out, m, o, r) {
    n = split(p, parts, "/")
    m = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] == "" || parts[i] == ".") continue
        if (parts[i] == "..") { if (m == 0) return ""; m--; continue }
        out[++m] = parts[i]
    }
    r = ""
    for (o = 1; o <= m; o++) r = (o == 1 ? out[o] : r "/" out[o])
    return r
}
function dirname(p) { if (index(p, "/") == 0) return ""; sub(/\/[^\/]*$/, "", p); return p }
# Found from the root, the file s own directory or any directory above it.
function found_near(file, p,    d, q) {
    if (exists(normal(p))) return 1
    d = dirname(file)
    while (d != "") {
        q = normal(d "/" p)
        if (q != "" && exists(q)) return 1
        d = dirname(d)
    }
    return 0
}
function placeholder(p,    parts, n, i) {
    n = split(p, parts, "/")
    for (i = 1; i <= n; i++) if (parts[i] ~ /^[A-Z][A-Z0-9_]*$/ || parts[i] ~ /^<.*>$/) return 1
    return 0
}
function report_missing(file, line, p) {
    key = file SUBSEP line SUBSEP p
    if (key in reported) return
    reported[key] = 1
    printf "%s:%s: missing %s\n", file, line, p
    missing++
}
# One candidate token: cleans it, decides whether it is a path, checks it.
function consider(file, line, tok,    first, n, alts, i, pre, post, body, d, q) {
    sub(/^[`"(\[<]+/, "", tok)
    sub(/[`"),.;:!?\]>]+$/, "", tok)
    sub(/^\.\//, "", tok)
    if (tok == "" || tok ~ /^\//) return
    if (index(tok, "{") > 0) {
        if (match(tok, /\{[^{}]*\}/)) {
            pre = substr(tok, 1, RSTART - 1)
            body = substr(tok, RSTART + 1, RLENGTH - 2)
            post = substr(tok, RSTART + RLENGTH)
            if (index(post, "{") > 0 || index(body, ",") == 0) return
            n = split(body, alts, ",")
            for (i = 1; i <= n; i++) consider(file, line, pre alts[i] post)
        }
        return
    }
    if (index(tok, ",") > 0) return
    first = tok
    sub(/\/.*/, "", first)
    if (first == "target" || first == ".venv") return
    if (placeholder(tok)) return
    if (tok ~ /^\.\.\//) {
        if (kind != "md") return
        # Relative to the file: only when it lands on a top-level directory of the checkout.
        d = dirname(file)
        q = normal((d == "" ? "" : d "/") tok)
        if (q == "") return
        first = q
        sub(/\/.*/, "", first)
        if (!(first in top_dirs)) return
        checked++
        if (!exists(q)) report_missing(file, line, tok)
        return
    }
    if (index(tok, "/") > 0) {
        if (!(first in top_dirs)) return
        # Prose such as "wire/JSON-breaking" is not a path: a path has a file extension, a
        # trailing slash, three or more parts, or is quoted as code.
        if (!looks_like_path(tok, raw)) return
    } else if (!(tok in top_files) && !(tok in top_names)) return
    checked++
    if (found_near(file, tok)) return
    # A tree listing in a code block: an indented line starts with a path below the entry above.
    if (tree_head && suffix_known(tok)) return
    report_missing(file, line, tok)
}
function looks_like_path(p, line_text,    parts, n) {
    if (p ~ /\/$/) return 1
    n = split(p, parts, "/")
    if (n >= 3) return 1
    if (parts[n] ~ /[A-Za-z0-9_-]\.[A-Za-z0-9*]+$/) return 1
    if (index(line_text, "`" p) > 0) return 1
    return 0
}
function suffix_known(p,    k, n) {
    sub(/\/+$/, "", p)
    n = length(p) + 1
    for (k in known) if (length(k) > n && substr(k, length(k) - n + 1) == "/" p) return 1
    for (k in dirs) if (length(k) > n && substr(k, length(k) - n + 1) == "/" p) return 1
    return 0
}
BEGIN {
    while ((getline p < listing) > 0) add_known(p)
    close(listing)
    # Top-level files a document may name before they exist.
    split("Makefile Cargo.toml Cargo.lock README.md CHANGELOG.md CONTRIBUTING.md LICENSE rust-toolchain.toml", names, " ")
    for (i in names) top_names[names[i]] = 1
    checked = 0; missing = 0; outside = 0
}
{
    file = $1; line = $2; kind = $3
    text = $0
    sub(/^[^\t]*\t[^\t]*\t[^\t]*\t/, "", text)
    raw = text
    if (file != last_file) { fence = 0; last_file = file }
    if (kind == "md" && text ~ /^[ \t]*(```|~~~)/) { fence = !fence; next }
    if (text ~ /shared\/reference/ || text ~ /\.\.\/shared/) {
        printf "%s:%s: points outside the repository (shared reference notes): cite the original source instead\n", file, line
        outside++
    }
    # URLs go first: nothing in them is a repository path.
    gsub(/[A-Za-z][A-Za-z0-9+.-]*:\/\/[^ \t)>\]`"]*/, " ", text)
    # Markdown link targets: relative to the file that holds them.
    if (kind == "md") {
        rest = text
        while (match(rest, /\]\([^) \t]+\)/)) {
            target = substr(rest, RSTART + 2, RLENGTH - 3)
            rest = substr(rest, RSTART + RLENGTH)
            sub(/#.*/, "", target)
            if (target == "" || target ~ /^(mailto:|\/)/) continue
            checked++
            d = dirname(file)
            q = normal((d == "" ? "" : d "/") target)
            if (q == "" || !exists(q)) report_missing(file, line, target)
        }
    }
    rest = text
    at_start = (kind == "md" && fence && text ~ /^  +[^ ]/)
    first_tok = 1
    while (match(rest, /([A-Za-z0-9_.*+-]|\{[A-Za-z0-9_.,*+-]*\}|\/)+/)) {
        tok = substr(rest, RSTART, RLENGTH)
        tree_head = at_start && first_tok && substr(rest, 1, RSTART - 1) ~ /^ *$/
        first_tok = 0
        rest = substr(rest, RSTART + RLENGTH)
        if (index(tok, "/") == 0 && !(tok in top_files) && !(tok in top_names)) continue
        consider(file, line, tok)
    }
}
END {
    printf "check-doc-paths: %d paths checked, %d missing", checked, missing
    if (outside > 0) printf ", %d pointing outside the repository", outside
    printf "\n"
    exit (missing > 0 || outside > 0) ? 1 : 0
}'
