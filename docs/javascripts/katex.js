// Render the formulae that pymdownx.arithmatex (generic mode) leaves as \( ... \) and
// \[ ... \] inside <span|div class="arithmatex">, with the KaTeX copy shipped in
// docs/assets/katex (no network needed). Runs on every page load, including
// Material's instant navigation.
function ozakiRenderMath() {
  document.querySelectorAll(".arithmatex").forEach(function (el) {
    renderMathInElement(el, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(ozakiRenderMath);
} else {
  document.addEventListener("DOMContentLoaded", ozakiRenderMath);
}
