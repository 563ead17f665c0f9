#!/usr/bin/env bash
# Renders the pictures of docs/design.md: each docs/pictures/NAME.dot (the source, kept in the
# repository) to NAME.svg and NAME.png beside it, with Graphviz's dot. Run it after changing a
# source, look at the PNG, and commit the source with what it renders. On Debian as root it
# installs graphviz first (scripts/lib/install_deps.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../../scripts/lib/install_deps.sh
. "$here/../../scripts/lib/install_deps.sh"
install_deps required graphviz
for src in "$here"/*.dot; do
  base=${src%.dot}
  dot -Tsvg "$src" -o "$base.svg"
  dot -Tpng -Gdpi=100 "$src" -o "$base.png"
  echo "rendered docs/pictures/$(basename "$base").svg and .png"
done
