#!/usr/bin/env bash
# Fails when a type of another crate enters lockwarden's public API without
# being announced in scripts/public-api-foreign.txt.
#
# rustdoc's JSON output needs a nightly toolchain, so this reads the HTML a
# stable rustdoc writes: every foreign type in a public signature is a link
# into that crate's folder (../fred/..., ../tokio/...) when rustdoc finds a
# folder of that crate's name in its output directory. Documenting every
# dependency for those folders took three minutes of the test command, so
# the folders are made empty beforehand, one per crate in the dependency
# graph, and only lockwarden is documented. Standard library links go to
# doc.rust-lang.org and are not foreign.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}/public-api-doc"
# The library's features (not the command's): what users compile against.
features=(--no-default-features --features tls,blocking,metrics)
rm -rf "$target/doc"
mkdir -p "$target/doc"
cargo metadata --quiet --format-version 1 "${features[@]}" | python3 -c '
import json, sys
graph = json.load(sys.stdin)
used = {node["id"] for node in graph["resolve"]["nodes"]}
for package in graph["packages"]:
    if package["id"] in used and package["name"] != "lockwarden":
        for target in package["targets"]:
            if set(target["kind"]) & {"lib", "rlib", "proc-macro", "dylib"}:
                print(target["name"].replace("-", "_"))
' | sort -u | while read -r crate; do mkdir -p "$target/doc/$crate"; done
RUSTDOCFLAGS="" cargo doc --quiet --lib --no-deps "${features[@]}" --target-dir "$target"
# No pages, no check: fail rather than find nothing.
if [ ! -f "$target/doc/lockwarden/index.html" ]; then
    echo "check-public-api: rustdoc wrote no pages for lockwarden" >&2
    exit 1
fi
# Each page up to its "Blanket Implementations" (impls of other crates'
# traits for every type, such as tracing's Instrument: not lockwarden's
# API); links into the source view (src/) are not types.
links() {
    find "$target/doc/lockwarden" -name '*.html' -print0 \
        | xargs -0 perl -0777 -ne 's/id="blanket-implementations".*//s; print "$1\n" while m{href="(?:\.\./)+([a-z0-9_]+)/}g'
}
found=$(links | grep -vxE 'lockwarden|src' | sort -u || true)
allowed=$(grep -v '^#' scripts/public-api-foreign.txt | sed '/^$/d' | sort -u)
unannounced=$(comm -23 <(echo "$found" | sed '/^$/d') <(echo "$allowed"))
if [ -n "$unannounced" ]; then
    echo "check-public-api: types of these crates appear in the public API but are not listed in scripts/public-api-foreign.txt:" >&2
    echo "$unannounced" >&2
    for c in $unannounced; do
        echo "  $c is linked from:" >&2
        grep -rlE "href=\"(\.\./)+$c/" "$target/doc/lockwarden" | sed "s|$target/doc/||" | head -5 >&2 || true
    done
    exit 1
fi
echo "check-public-api: foreign crates in the public API: $(echo $found | tr '\n' ' ')(all announced)"
