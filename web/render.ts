/**
 * Answers as HTML for the page: the context with the answer span marked, the label with a bar per class,
 * the text with each mask's best guess marked. Pure functions of the answer (every piece of text is
 * escaped), so they are tested without a browser.
 */
import type { ClassifyAnswer, FillMaskAnswer, QaAnswer } from "../textinfer/mod.ts";
import { MASK_TEXT } from "../textinfer/mod.ts";

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const pct = (p: number) => `${(100 * p).toFixed(1)}%`;

export function renderQa(context: string, a: QaAnswer): string {
  const marked = a.end > a.start
    ? `${escapeHtml(context.slice(0, a.start))}<mark>${escapeHtml(context.slice(a.start, a.end))}</mark>${
      escapeHtml(context.slice(a.end))
    }`
    : `${escapeHtml(context)} <em>(no answer span)</em>`;
  const others = a.nbest.slice(1, 4).map((s) =>
    `<li>${escapeHtml(s.text)} <small>${pct(s.score)}</small></li>`
  );
  return `<p class="answer">Answer: <b>${escapeHtml(a.answer)}</b> <small>score ${pct(a.score)}</small></p>` +
    `<p class="context">${marked}</p>` +
    (others.length ? `<p>Next best:</p><ol>${others.join("")}</ol>` : "");
}

export function renderClassify(a: ClassifyAnswer): string {
  if ("value" in a) return `<p class="answer">Value: <b>${a.value.toFixed(4)}</b></p>`;
  const bars = Object.entries(a.scores).map(([label, p]) =>
    `<div class="bar${label === a.label ? " best" : ""}"><span>${escapeHtml(label)}</span>` +
    `<i style="width:${(100 * p).toFixed(1)}%"></i><small>${pct(p)}</small></div>`
  );
  return `<p class="answer">Label: <mark>${escapeHtml(a.label)}</mark> <small>${pct(a.score)}</small>` +
    `${a.truncated ? " <em>(text truncated)</em>" : ""}</p>${bars.join("")}`;
}

/** A guess joins the word before it when it is a continuation piece ("##s"). */
function guessHtml(before: string, token: string): { before: string; html: string } {
  if (token.startsWith("##")) {
    return { before: before.trimEnd(), html: `<mark>${escapeHtml(token.slice(2))}</mark>` };
  }
  return { before, html: `<mark>${escapeHtml(token)}</mark>` };
}

export function renderFillMask(text: string, a: FillMaskAnswer): string {
  const parts = text.split(MASK_TEXT);
  let html = "";
  for (let i = 1; i < parts.length; i++) {
    const guess = a.masks[i - 1]?.[0];
    const g = guess ? guessHtml(parts[i - 1], guess.token) : { before: parts[i - 1], html: MASK_TEXT };
    html += escapeHtml(g.before) + g.html;
  }
  html += escapeHtml(parts[parts.length - 1]);
  const lists = a.masks.map((m, i) =>
    `<li>mask ${i + 1}: ${
      m.map((g) => `${escapeHtml(g.token)} <small>${pct(g.score)}</small>`).join(", ")
    }</li>`
  );
  return `<p class="answer">${html}</p><ol class="guesses">${lists.join("")}</ol>`;
}
