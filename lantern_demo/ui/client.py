"""What the page adds in the browser: layout CSS (phone widths, the statistics table, pop-ups, the
prompt notice) and the page's script (suggestion links, scrolling to the result, Enter in a number box).

``page.launch_kwargs`` passes both to ``demo.launch()``.
"""

#: Appended to ``page.CSS``.
CSS = """
/* a prompt the model did not recognise: the notice's quote block stands out */
#notice blockquote { border-left: 4px solid #f97316; background: rgba(249, 115, 22, 0.08);
  padding: 0.4em 0.8em; margin: 0.4em 0; font-size: 1.05em; }
#notice a[href^="#try:"] { font-weight: 600; }
/* pop-ups at the bottom, where they do not cover the title and the notice */
.toast-wrap { top: auto !important; bottom: var(--size-4); }
/* the statistics table fits its column: cells wrap instead of scrolling sideways (the body's
   rows are Gradio's virtual rows, .body-cell; the header is a table) */
#stats-table th, #stats-table .body-cell, #stats-table .body-cell * {
  white-space: normal !important; overflow-wrap: break-word; }
#stats-table .virtual-table-viewport, #stats-table table { overflow-x: hidden !important; }
#stats-table table { table-layout: fixed; width: 100% !important; }
@media (max-width: 640px) {
  #stats-table th, #stats-table th *, #stats-table .body-cell, #stats-table .body-cell * {
    font-size: 10px !important; padding: 2px 1px !important; min-width: 0 !important; } }
"""

#: The page's script (run once on load): a click on a suggestion link (``notice.TRY_LINK``,
#: "#try:<name>") puts its name into the prompt box; on a narrow screen, Generate (or Enter in the
#: prompt) scrolls the method's image into view, since the results column sits below the controls
#: there; Enter in the δ, λ or k number box commits it like Tab (Gradio re-runs on blur, not on Enter).
JS = """
() => {
  const NARROW = 768;
  const showResult = () => {
    if (window.innerWidth < NARROW) {
      document.querySelector('#main-image')?.scrollIntoView({behavior: 'smooth', block: 'start'});
    }
  };
  document.addEventListener('click', (event) => {
    const link = event.target.closest('a[href^="#try:"]');
    if (link) {
      event.preventDefault();
      const box = document.querySelector('#prompt textarea');
      box.value = decodeURIComponent(link.getAttribute('href').slice(5));
      box.dispatchEvent(new Event('input', {bubbles: true}));
      box.focus();
    } else if (event.target.closest('#generate-btn')) {
      showResult();
    }
  }, true);
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Enter' || event.shiftKey) return;
    if (event.target.closest('#prompt')) showResult();
    // Enter in a relaxation slider's number box commits the value as Tab does (a re-run)
    if (event.target.matches('#delta input[type=number], #lam input[type=number], #k input[type=number]')) {
      event.target.blur();
    }
  }, true);
}
"""
