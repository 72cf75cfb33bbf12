// Keyboard navigation (arrows, PageUp/PageDown, space, Home/End) and each slide scaled to fit the window.
// Printing (the PDF) ignores the scaling: deck.css sets zoom 1 for print.
(() => {
  const slides = Array.from(document.querySelectorAll(".slide"));
  const fit = () => {
    const scale = Math.min(window.innerWidth / 1328, window.innerHeight / 768);
    slides.forEach((s) => { s.style.zoom = String(scale); });
  };
  // Code cut from the source files: from the size the build estimated, shrink until the definition fits.
  const fitCode = () => {
    document.querySelectorAll("figure.excerpt").forEach((fig) => {
      const box = fig.querySelector(".code");
      const pre = box && box.querySelector("pre");
      if (!pre) return;
      const style = getComputedStyle(box);  // the box's inside, less its padding: where the code must fit
      const height = box.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
      const width = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      let size = parseFloat(fig.style.fontSize) || 16;
      while (size > 8 && (pre.scrollWidth > width || pre.scrollHeight > height)) {
        size -= 0.5;
        fig.style.fontSize = `${size}px`;
      }
    });
  };
  const current = () => {
    const mid = window.innerHeight / 2;
    const i = slides.findIndex((s) => s.getBoundingClientRect().bottom >= mid);
    return i < 0 ? slides.length - 1 : i;
  };
  const go = (i) => slides[Math.max(0, Math.min(slides.length - 1, i))].scrollIntoView({ block: "center" });
  document.addEventListener("keydown", (e) => {
    const next = ["ArrowRight", "ArrowDown", "PageDown", " "].includes(e.key);
    const prev = ["ArrowLeft", "ArrowUp", "PageUp"].includes(e.key);
    if (!next && !prev && e.key !== "Home" && e.key !== "End") return;
    e.preventDefault();
    if (e.key === "Home") go(0);
    else if (e.key === "End") go(slides.length - 1);
    else go(current() + (next ? 1 : -1));
  });
  window.addEventListener("resize", fit);
  fitCode();
  fit();
})();
