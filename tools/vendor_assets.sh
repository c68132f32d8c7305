#!/usr/bin/env bash
# Vendor the browser-side JavaScript the built book needs, so the HTML works offline:
#   _vendor/mathjax/   MathJax 3 (tex-mml-chtml component, pruned to what it can load)
#   _vendor/widgets/   require.js + @jupyter-widgets/html-manager embed-amd.js (+ its icon fonts)
# _config.yml points Sphinx (mathjax_path) and myst-nb (nb_ipywidgets_js) at these copies through
# html_static_path: ["_vendor"]. Do NOT move them under _static/: Jupyter Book 1 then injects
# every .js/.css file found there into every page (see docs/toolchain notes).
#
# Idempotent: when _vendor/ already holds exactly the pinned set (checked through a stamp file
# and the key files) it does nothing and needs neither npm nor the network.
#   bash tools/vendor_assets.sh           # vendor if needed
#   bash tools/vendor_assets.sh --force   # re-download and rebuild _vendor/
#
# To bump a package: change its version below, run `npm view <pkg>@<version> dist.integrity`
# and paste the sha512 value, then run with --force and rebuild the book and
# `pytest tests/book/test_book_html.py` (it checks that the pruned MathJax still typesets).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${RL_LAB_VENDOR_DIR:-$ROOT/_vendor}"
FORCE=0
case "${1:-}" in
  --force) FORCE=1 ;;
  "") ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

# name | exact version | npm dist.integrity (sha512 of the tarball, base64)
PINS=(
  "mathjax|3.2.2|sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="
  "requirejs|2.3.7|sha512-DouTG8T1WanGok6Qjg2SXuCMzszOo0eHeH9hDZ5Y4x8Je+9JB38HdTLT4/VA8OaUhBa0JPVHJ0pyBkM1z+pDsw=="
  "@jupyter-widgets/html-manager|1.0.15|sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA=="
)
# Bump LAYOUT when the copy/prune rules below change, so existing _vendor/ folders get rebuilt.
LAYOUT=2
STAMP_TEXT="layout=$LAYOUT
$(printf '%s\n' "${PINS[@]}")"
KEY_FILES=(mathjax/tex-mml-chtml.js mathjax/output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff
           mathjax/input/tex/extensions/cancel.js mathjax/a11y/explorer.js
           widgets/require.js widgets/config.js widgets/embed-amd.js)

if [[ $FORCE == 0 && -f "$DEST/.stamp" ]] && [[ "$(cat "$DEST/.stamp")" == "$STAMP_TEXT" ]]; then
  ok=1
  for f in "${KEY_FILES[@]}"; do [[ -s "$DEST/$f" ]] || ok=0; done
  if [[ $ok == 1 ]]; then
    echo "vendor_assets: $DEST is up to date (use --force to redo)"
    exit 0
  fi
fi

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  cat >&2 <<'EOF'
vendor_assets: ERROR: `npm` (and `node`) not found on PATH.
  The book vendors MathJax and the Jupyter widget JavaScript from the npm registry so that
  the built HTML works without internet. Install Node.js >= 18 with npm, e.g.
    Debian/Ubuntu:  sudo apt-get install -y nodejs npm
    conda:          conda install -c conda-forge nodejs   (environment.yml already lists it)
  then re-run:  bash tools/vendor_assets.sh   (or `make vendor`)
EOF
  exit 1
fi

t0=$(date +%s)
TMP="$(mktemp -d "${TMPDIR:-/tmp}/rl_lab_vendor.XXXXXX")"
STAGE="$DEST.staging.$$"
cleanup() { rm -rf "$TMP" "$STAGE"; }
trap cleanup EXIT

echo "vendor_assets: downloading pinned npm packages into $TMP"
specs=()
for pin in "${PINS[@]}"; do
  IFS='|' read -r name version _ <<<"$pin"
  specs+=("$name@$version")
done
(cd "$TMP" && npm pack --silent --ignore-scripts "${specs[@]}" >/dev/null)

# Check each tarball against the pinned sha512 (the same value as npm's dist.integrity).
for pin in "${PINS[@]}"; do
  IFS='|' read -r name version integrity <<<"$pin"
  tgz="$TMP/$(echo "$name" | sed -e 's/^@//' -e 's#/#-#')-$version.tgz"
  [[ -f "$tgz" ]] || { echo "vendor_assets: ERROR: npm pack did not produce $tgz" >&2; exit 1; }
  got="sha512-$(node -e 'const c=require("crypto"),fs=require("fs");process.stdout.write(c.createHash("sha512").update(fs.readFileSync(process.argv[1])).digest("base64"))' "$tgz")"
  if [[ "$got" != "$integrity" ]]; then
    echo "vendor_assets: ERROR: integrity mismatch for $name@$version" >&2
    echo "  expected $integrity" >&2
    echo "  got      $got" >&2
    exit 1
  fi
  echo "vendor_assets: $name@$version integrity OK"
  mkdir -p "$TMP/x/$name"
  tar -xzf "$tgz" -C "$TMP/x/$name"
done

MJ="$TMP/x/mathjax/package/es5"
RJ="$TMP/x/requirejs/package"
HM="$TMP/x/@jupyter-widgets/html-manager/package/dist"

rm -rf "$STAGE"
mkdir -p "$STAGE/mathjax" "$STAGE/widgets"

# --- MathJax: only what the tex-mml-chtml component loads or can load on demand -------------
#  tex-mml-chtml.js          the combined component (TeX + MathML input, CHTML output with the
#                            TeX font metrics, ui/menu, a11y/assistive-mml, tex autoload/require)
#  output/chtml/fonts/       the woff-v2 web fonts the CHTML CSS points at (+ tex.js metrics)
#  input/tex/extensions/     TeX packages pulled in by autoload (\cancel, \boldsymbol, ...) or \require
#  input/mml/extensions/     [mml]/mml3, which the loader config declares
#  a11y/                     semantic-enrich / complexity / explorer / sre, loaded by the menu's
#                            accessibility settings
#  sre/mathmaps/             speech-rule locale data that a11y/sre fetches when speech is on
#  output/svg.js, output/svg/fonts/   the menu's "Math Renderer -> SVG" switch loads output/svg
# Dropped: other combined components (tex-chtml-full*, *-svg, mml-*), input/tex*.js,
# input/asciimath.js, adaptors/, ui/lazy.js, ui/safe.js, node-main.js, latest.js (CDN probe).
copy_mj() { mkdir -p "$STAGE/mathjax/$(dirname "$1")"; cp -R "$MJ/$1" "$STAGE/mathjax/$1"; }
for p in tex-mml-chtml.js output/chtml/fonts input/tex/extensions input/mml/extensions \
         a11y sre/mathmaps output/svg.js output/svg/fonts; do
  copy_mj "$p"
done
cp "$TMP/x/mathjax/package/LICENSE" "$STAGE/mathjax/LICENSE"

# --- Jupyter widgets: require.js + the AMD embed bundle and the FontAwesome files it references
cp "$RJ/require.js" "$STAGE/widgets/require.js"
cp "$HM/embed-amd.js" "$STAGE/widgets/embed-amd.js"
[[ -f "$HM/embed.js.LICENSE.txt" ]] && cp "$HM/embed.js.LICENSE.txt" "$STAGE/widgets/embed-amd.js.LICENSE.txt"
nfonts=0
for f in "$HM"/*.woff2 "$HM"/*.woff "$HM"/*.ttf "$HM"/*.eot "$HM"/*.svg; do
  [[ -e "$f" ]] || continue
  cp "$f" "$STAGE/widgets/"; nfonts=$((nfonts + 1))
done
# Every font file embed-amd.js names must be present (webpack resolves them next to the script).
for ref in $(grep -oE '[0-9a-f]{20}\.(woff2|woff|ttf|eot|svg)' "$STAGE/widgets/embed-amd.js" | sort -u); do
  [[ -s "$STAGE/widgets/$ref" ]] || { echo "vendor_assets: ERROR: embed-amd.js needs $ref, not in the package" >&2; exit 1; }
done

# embed-amd.js computes the URL of those fonts from the RequireJS module URI of
# "@jupyter-widgets/html-manager/dist/libembed-amd", which by default resolves next to the *page*
# (e.g. labs/@jupyter-widgets/html-manager/dist/*.woff2 -> 404). This shim, loaded between
# require.js and embed-amd.js (see nb_ipywidgets_js in _config.yml), maps that module path to the
# folder the shim itself is served from, i.e. _static/widgets/.
cat >"$STAGE/widgets/config.js" <<'JS'
/* Written by tools/vendor_assets.sh. Load after require.js and before embed-amd.js. */
(function () {
  var s = document.currentScript && document.currentScript.src;
  if (!s || !window.requirejs) { return; }
  var dir = new URL(".", s).href.replace(/\/$/, "");
  window.requirejs.config({ paths: { "@jupyter-widgets/html-manager/dist": dir } });
})();
JS

{
  echo "Vendored by tools/vendor_assets.sh from the npm registry; integrity-checked (sha512)."
  for pin in "${PINS[@]}"; do
    IFS='|' read -r name version integrity <<<"$pin"
    lic="$(node -e 'process.stdout.write(String(require(process.argv[1]).license||"?"))' "$TMP/x/$name/package/package.json")"
    echo "$name@$version  license=$lic  $integrity"
  done
} >"$STAGE/VERSIONS.txt"
for f in "${KEY_FILES[@]}"; do
  [[ -s "$STAGE/$f" ]] || { echo "vendor_assets: ERROR: $f missing after copy" >&2; exit 1; }
done
printf '%s' "$STAMP_TEXT" >"$STAGE/.stamp"

rm -rf "$DEST"
mv "$STAGE" "$DEST"
echo "vendor_assets: wrote $DEST ($(du -sh "$DEST" | cut -f1), $(find "$DEST" -type f | wc -l) files, $nfonts widget font files) in $(( $(date +%s) - t0 ))s"
