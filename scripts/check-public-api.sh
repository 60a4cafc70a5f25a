#!/usr/bin/env bash
# Fails when a type of another crate enters lockwarden's public API without
# being announced in scripts/public-api-foreign.txt.
#
# rustdoc's JSON output needs a nightly toolchain, so this reads the HTML a
# stable rustdoc writes: documented together with its dependencies, every
# foreign type in a public signature is a link into that crate's folder
# (../fred/..., ../tokio/...). Standard library links go to
# doc.rust-lang.org and are not foreign.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}/public-api-doc"
# The library's features (not the command's): what users compile against.
RUSTDOCFLAGS="" cargo doc --quiet --lib --no-default-features --features tls,blocking,metrics \
    --target-dir "$target"
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
