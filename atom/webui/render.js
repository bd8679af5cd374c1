// Model output as markdown: marked renders it, DOMPurify removes anything that could
// run (scripts, event-handler attributes, javascript: links), highlight.js colours the
// code blocks, and each block gets a copy button. Without the libraries (a checkout
// where `make setup` has not run) the text is shown as text.

const { marked, DOMPurify, hljs } = window;

if (marked) marked.setOptions({ gfm: true, breaks: false });

export function renderMarkdown(element, text) {
  if (!marked || !DOMPurify) {
    element.textContent = text;
    return;
  }
  const html = marked.parse(text);
  element.replaceChildren(DOMPurify.sanitize(html, { RETURN_DOM_FRAGMENT: true }));
  for (const code of element.querySelectorAll("pre > code")) decorate(code);
}

function decorate(code) {
  if (hljs) hljs.highlightElement(code);
  const copy = document.createElement("button");
  copy.type = "button";
  copy.className = "copy";
  copy.textContent = "Copy";
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(code.textContent);
      copy.textContent = "Copied";
    } catch (_) {
      copy.textContent = "Copy failed";
    }
    setTimeout(() => (copy.textContent = "Copy"), 1500);
  });
  code.parentElement.append(copy);
}
