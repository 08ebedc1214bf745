// What the memory calculator shows: each term's row (term, exact bytes or GiB, the text shown),
// the verdict, the error.
r => ({
  rows: [...r.querySelectorAll("tr[data-term]")].map(t => [t.dataset.term, t.dataset.bytes ?? t.dataset.gib,
                                                           t.querySelector("td").textContent]),
  verdict: r.querySelector(".mc-verdict")?.textContent.replace(/\s+/g, " ").trim(),
  error: r.querySelector(".mc-error")?.textContent,
})
