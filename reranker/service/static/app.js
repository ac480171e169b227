// The reranker web page: four views over the JSON API, as hash routes.
//
//   #/search        (the first screen, at /ui) paste an abstract, get papers: search as users
//                   get it (an experiment may interleave it); clicks recorded
//   #/compare       two rankers side by side over the same BM25 window, rank changes marked;
//                   an evaluation report's figures for the two rankers (a judged data set's, say) and
//                   its per-query wins and losses, plotted
//   #/paper/<id>    one paper: its opening, top topics and papers like it
//   #/experiments   interleaving experiments: traffic, clicks, wins, p-value, the preference
//                   over time; with the admin key, start, change, stop and delete them
//
// Every element is built with createElement/textContent: text from the API (titles,
// abstracts, reasons) is never parsed as HTML. The plots are drawn by plots.js.
"use strict";

(function () {
  // The compare view opens on the first stage against the service's default ranker.
  const BASELINE = "bm25";
  const PAGE_SIZE = 10;
  const CLIENT_ID_KEY = "reranker.client_id";
  const ADMIN_KEY = "reranker.admin_key";
  // A document without a title is named by this many of its opening words.
  const TITLE_WORDS = 8;

  const state = {
    rankers: [],
    live: { queryId: null, clicks: 0, experiment: null },
    previousRoute: "#/search",
    currentRoute: null,
    carryStatus: false, // keep the status lines through the next change of view
  };

  // --- building the DOM from data ----------------------------------------------------

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name === "text") node.textContent = String(value);
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, child) {
    if (child === undefined || child === null || child === false) return;
    if (Array.isArray(child)) child.forEach((c) => append(node, c));
    else if (child instanceof Node) node.appendChild(child);
    else node.appendChild(document.createTextNode(String(child)));
  }

  function byId(id) {
    return document.getElementById(id);
  }

  function number(value, digits) {
    return typeof value === "number" && Number.isFinite(value) ? value.toFixed(digits) : "—";
  }

  // To 3 significant digits, as the command line prints a traffic share: rounding to a tenth
  // of a percent showed a share of 0.04% as "0%", an experiment seemingly taking no searches.
  function percent(value) {
    return typeof value === "number" ? `${Number((value * 100).toPrecision(3))}%` : "—";
  }

  // A title of spaces or invisible characters (zero-width ones, a soft hyphen) is no title:
  // shown, it was a link 0 px high, with nothing to click.
  const INVISIBLE = /[\s\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff]/gu;

  // What names a document in a list: its title, else its opening words (from the API's
  // `snippet` or `excerpt`), else its id.
  function displayTitle(doc) {
    if (doc.title && String(doc.title).replace(INVISIBLE, "") !== "") return doc.title;
    const words = String(doc.snippet || doc.excerpt || "").split(/\s+/).filter(Boolean);
    if (words.length === 0) return doc.id;
    return words.slice(0, TITLE_WORDS).join(" ") + (words.length > TITLE_WORDS || doc.truncated ? " …" : "");
  }

  // The id, shown beside a title that is not one (or the id itself, when that is the title).
  function idNote(doc) {
    return displayTitle(doc) === doc.id ? null : doc.id;
  }

  // A hit's opening words (the API's `snippet`, asked for by every list), under its name;
  // "…" only where the API says it cut the text (a short abstract is shown whole).
  function snippetLine(hit) {
    return hit.snippet ? el("p", { class: "snippet", text: hit.snippet + (hit.snippet_truncated ? " …" : "") }) : null;
  }

  // A topic's number names another topic among the corrected topics (those of word vectors
  // with the corpus's common direction removed: hidden_topics_corrected's and its fusions', the
  // default ranker among them) than among the paper's (hidden_topics', hidden_topics_code's):
  // "Topic 1" of one is not "Topic 1" of the other, so every topic is named with its set.
  // `set`: /documents' or an explanation's `topic_set`.
  function topicLabel(set, number) {
    return `${set === "corrected" ? "Corrected" : "Uncorrected"} topic ${number}`;
  }

  function paperHref(id) {
    return "#/paper/" + encodeURIComponent(id);
  }

  function bar(fraction) {
    const outer = el("span", { class: "bar", "aria-hidden": "true" });
    const inner = el("span", { class: "bar-fill" });
    inner.style.width = `${Math.max(0, Math.min(1, fraction || 0)) * 100}%`; // CSSOM: allowed by the CSP
    outer.appendChild(inner);
    return outer;
  }

  // --- talking to the API ------------------------------------------------------------

  class ApiFailure extends Error {
    constructor(status, type, reason) {
      super(reason);
      this.status = status;
      this.type = type;
      this.reason = reason;
    }

    describe() {
      return this.status ? `${this.reason} (HTTP ${this.status}, ${this.type})` : this.reason;
    }
  }

  async function api(method, path, body, headers) {
    const init = { method, headers: { Accept: "application/json", ...(headers || {}) } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      throw new ApiFailure(0, "network_error", `cannot reach the service (${error.message})`);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (error) {
      data = null;
    }
    if (!response.ok) {
      const found = data && data.error;
      const reason = (found && found.reason) || `${response.status} ${response.statusText}`;
      throw new ApiFailure(response.status, (found && found.type) || "http_error", reason);
    }
    return data;
  }

  function describe(error) {
    return error instanceof ApiFailure ? error.describe() : String(error && error.message ? error.message : error);
  }

  // --- status messages ---------------------------------------------------------------

  function say(message, kind) {
    const status = byId("status");
    status.textContent = message;
    status.dataset.kind = kind || "info";
  }

  function storage(kind) {
    try {
      return kind === "local" ? window.localStorage : window.sessionStorage;
    } catch (error) {
      return null; // storage disabled: keep things in memory for this page only
    }
  }

  function randomId() {
    if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
    const bytes = window.crypto.getRandomValues(new Uint8Array(16));
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  let memoryClientId = null;

  function clientId() {
    const store = storage("local");
    let id = store ? store.getItem(CLIENT_ID_KEY) : memoryClientId;
    if (!id) {
      id = randomId();
      if (store) store.setItem(CLIENT_ID_KEY, id);
      memoryClientId = id;
    }
    return id;
  }

  // --- routing -----------------------------------------------------------------------

  const VIEWS = ["compare", "search", "paper", "experiments"];
  // The first screen: a librarian's (paste an abstract, get papers), whose clicks are the ones an
  // experiment counts; comparing rankers is the search team's, one link away.
  const HOME = "search";
  const TITLES = { compare: "Compare rankers", search: "Search papers", paper: "Paper", experiments: "Experiments" };

  function show(name, moveFocus) {
    for (const view of VIEWS) byId(`view-${view}`).hidden = view !== name;
    for (const link of document.querySelectorAll("nav a[data-view]")) {
      if (link.dataset.view === name) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    document.title = `${TITLES[name]} · reranker`;
    if (moveFocus) {
      const heading = byId(`view-${name}`).querySelector("h1");
      heading.setAttribute("tabindex", "-1");
      heading.focus();
    }
  }

  function route(moveFocus) {
    // The bare address (/ui, and a hash that names no route) is the first screen's: Back to
    // it from a paper showed the paper still, with the search hidden.
    const hash = window.location.hash.startsWith("#/") ? window.location.hash : `#/${HOME}`;
    if (state.currentRoute !== null && state.currentRoute !== hash) state.previousRoute = state.currentRoute;
    // The status lines speak of the view they were written on: a new view starts without them,
    // except the click message written just before a click opens its paper.
    if (state.currentRoute !== hash) {
      if (state.carryStatus) state.carryStatus = false;
      else {
        say("", "info");
        byId("event-status").textContent = "";
      }
    }
    state.currentRoute = hash;
    const [name, ...rest] = hash.slice(2).split("/");
    // A paper still loading when its view is left is not drawn (nor its title set) over this one.
    if (name !== "paper") ++paperRequest;
    if (name === "paper" && rest.length > 0) {
      show("paper", moveFocus);
      const back = byId("paper-back");
      back.setAttribute("href", state.previousRoute.startsWith("#/paper/") ? `#/${HOME}` : state.previousRoute);
      // A link the page made is encodeURIComponent's; one typed by hand may hold a bare "%".
      let id;
      try {
        id = decodeURIComponent(rest.join("/"));
      } catch (error) {
        showNoPaper(`Not a paper link: ${rest.join("/")} (percent-encode the id, a "%" as %25)`);
        return;
      }
      if (!id) {
        // Asked for, /documents/_doc/ is no route: its reason spoke of routes, not of the link.
        showNoPaper("Not a paper link: #/paper/ names no paper (it needs a paper's id after the slash).");
        return;
      }
      loadPaper(id);
    } else if (name === "experiments") {
      show("experiments", moveFocus);
      loadExperiments();
    } else {
      show(VIEWS.includes(name) && name !== "paper" ? name : HOME, moveFocus);
    }
  }

  // --- compare: two rankers side by side ----------------------------------------------

  async function initRankers() {
    const [listed, experiments] = await Promise.allSettled([api("GET", "/rankers"), api("GET", "/experiments")]);
    if (listed.status !== "fulfilled") {
      say(`Cannot list the rankers: ${describe(listed.reason)}`, "error");
      return;
    }
    // A ranker that cannot run here (doc2vec with no trained model) is offered disabled, its
    // reason as the title; the pairs picked below are of rankers that can run.
    state.rankers = listed.value.rankers.filter((r) => r.available !== false).map((r) => r.name);
    const options = () =>
      listed.value.rankers.map((r) =>
        el("option", {
          value: r.name,
          text: r.name === listed.value.default ? `${r.name} (default)` : r.name,
          disabled: r.available === false,
          title: r.available === false ? r.reason || "not available here" : null,
        })
      );
    let pair = [BASELINE, listed.value.default].filter((name) => state.rankers.includes(name));
    if (experiments.status === "fulfilled") {
      const running = (experiments.value.experiments || []).find((e) => e.status === "running");
      if (running && running.rankers.every((name) => state.rankers.includes(name))) pair = running.rankers;
    }
    if (pair.length < 2) pair = [state.rankers[0], state.rankers[Math.min(1, state.rankers.length - 1)]];
    for (const [select, chosen] of [[byId("compare-left"), pair[0]], [byId("compare-right"), pair[1]]]) {
      select.replaceChildren(...options());
      select.value = chosen;
    }
    // A new experiment starts from the same pair, unless one is running (then the default pair).
    const fresh = [BASELINE, listed.value.default].filter((name) => state.rankers.includes(name));
    const start = fresh.length === 2 ? fresh : pair;
    for (const [select, chosen] of [[byId("create-ranker-a"), start[1]], [byId("create-ranker-b"), start[0]]]) {
      select.replaceChildren(...options());
      select.value = chosen;
    }
  }

  // initRankers' promise: a search or a new experiment asked for before the dropdowns are
  // filled waits for them (their value was "" then: the search failed as "unknown ranker ''").
  let rankersListed = Promise.resolve();

  // The values of two ranker dropdowns, once they are filled; null (the status says why) when
  // the rankers could not be listed.
  async function chosenRankers(ids, tell) {
    if (ids.some((id) => !byId(id).value)) {
      tell("Loading the rankers…", "busy");
      await rankersListed;
    }
    const chosen = ids.map((id) => byId(id).value);
    if (chosen.some((name) => !name)) {
      tell("The rankers could not be listed, so none can be picked: reload the page.", "error");
      return null;
    }
    return chosen;
  }

  // The last comparison asked for. One sent while another runs is searched (ignoring it left the
  // button doing nothing, and the columns then showed the old query's hits under the new text);
  // the earlier one's answers are dropped when they come.
  let compareRequest = 0;

  async function runCompare(event) {
    event.preventDefault();
    const query = byId("compare-query").value.trim();
    const request = ++compareRequest; // a blank query, too, outdates the comparison before it
    const columns = [byId("column-left"), byId("column-right")];
    if (!query) {
      // Not the last query's hits left under a box that holds none: they read as its answer.
      for (const column of columns) column.querySelectorAll(".column-meta, .hits").forEach((part) => part.replaceChildren());
      byId("compare-columns").removeAttribute("aria-busy");
      say("Type or paste a query first.", "error");
      byId("compare-query").focus();
      return;
    }
    byId("compare-columns").setAttribute("aria-busy", "true");
    try {
      const rankers = await chosenRankers(["compare-left", "compare-right"], say);
      if (request !== compareRequest) return;
      if (!rankers) return;
      say(`Searching with ${rankers[0]} and ${rankers[1]}…`, "busy");
      const results = await Promise.allSettled(
        rankers.map((ranker) => api("POST", "/search", { query, ranker, size: PAGE_SIZE, explain: true, snippets: true }))
      );
      if (request !== compareRequest) return;
      results.forEach((result, side) => {
        const other = results[1 - side];
        renderColumn(columns[side], rankers[side], result, other.status === "fulfilled" ? other.value : null, rankers[1 - side]);
      });
      const failed = results.filter((r) => r.status === "rejected");
      if (failed.length) say(`Search failed: ${describe(failed[0].reason)}`, "error");
      else say(`Showing ${results[0].value.hits.length} hits from ${rankers[0]} and ${results[1].value.hits.length} from ${rankers[1]}.`, "info");
    } finally {
      if (request === compareRequest) byId("compare-columns").removeAttribute("aria-busy");
    }
  }

  function renderColumn(column, ranker, result, other, otherRanker) {
    const heading = column.querySelector("h2");
    const meta = column.querySelector(".column-meta");
    const list = column.querySelector(".hits");
    heading.textContent = ranker;
    meta.replaceChildren();
    list.replaceChildren();
    column.dataset.ranker = ranker;
    if (result.status === "rejected") {
      meta.append(el("span", { class: "problem", text: `Failed: ${describe(result.reason)}` }));
      return;
    }
    const body = result.value;
    // One line of facts, " · " between them: the window, the status (if not ok), the note.
    // bm25 reranks nothing: its column is the window as BM25 ordered it.
    const candidates =
      ranker === "bm25"
        ? `${body.candidates} BM25 candidates in BM25 order`
        : `${body.candidates} BM25 candidates reranked in ${number(body.timings_ms.rerank, 1)} ms`;
    const facts = [candidates, statusNote(body)];
    if (body.hits.length > 0 && !body.hits.some((hit) => hit.explanation) && (body.status === "ok" || body.status === "partial")) {
      facts.push(el("span", { class: "note", text: `${ranker} does not score by topics: no explanations.` }));
    }
    facts.filter((fact) => fact).forEach((fact, i) => meta.append(...(i ? [" · ", fact] : [fact])));
    if (body.hits.length === 0) {
      list.append(noHits(body));
      return;
    }
    const otherRanks = new Map((other ? other.hits : []).map((hit) => [hit.id, hit.rank]));
    for (const hit of body.hits) {
      list.append(renderHit(hit, other ? moveMarker(hit.rank, otherRanks.get(hit.id), otherRanker, other.hits.length) : null, body.status));
    }
  }

  // An empty list. From an empty index it is not "no match": every query finds nothing until a
  // corpus is indexed (a fresh deployment), which /readyz counts; the list says so once it knows.
  //
  // A query with no word to search (stop words, numbers, single letters, punctuation: neither
  // `query_words` nor `oov_words` holds one) says so, whichever ranker answered.
  function noHits(body) {
    const nothingToSearch = (body.query_words || []).length === 0 && (body.oov_words || []).length === 0;
    const text = nothingToSearch
      ? "No document matches this query: it has no words to search (stop words, numbers and single letters are left out)."
      : "No document matches this query.";
    const item = el("li", { class: "empty", text });
    if (body.candidates === 0) {
      api("GET", "/readyz").then(
        (ready) => {
          if (ready && ready.documents === 0) {
            item.textContent = "The index holds no papers yet: nothing can match until a corpus is indexed (reranker index CORPUS.jsonl).";
          }
        },
        () => {} // not ready or not reachable: "no match" stays, and the next search says more
      );
    }
    return item;
  }

  // An answer whose status is not "ok" (degraded, query_out_of_vocabulary, partial, tied) says
  // so with its reason, in Compare's columns and above the search's list alike.
  //
  // Not query_out_of_vocabulary's with no hits: its reason then says that no word has a vector
  // (or that there is none to search) and nothing matched, which the list's own message says.
  function statusNote(body) {
    if (!body.status || body.status === "ok") return null;
    if (body.status === "query_out_of_vocabulary" && body.hits.length === 0) return null;
    const text = `Status: ${body.status}${body.reason ? ` — ${body.reason}` : ""}`;
    return el("span", { class: "problem answer-status", "data-status": body.status, text });
  }

  function moveMarker(rank, otherRank, otherRanker, otherSize) {
    let text, label, kind;
    if (otherRank === undefined) {
      [text, kind, label] = ["new", "new", `not in ${otherRanker}'s top ${otherSize}`];
    } else if (otherRank > rank) {
      const places = otherRank - rank;
      [text, kind, label] = [`▲${places}`, "up", `${places} place${places > 1 ? "s" : ""} higher than in ${otherRanker} (rank ${otherRank} there)`];
    } else if (otherRank < rank) {
      const places = rank - otherRank;
      [text, kind, label] = [`▼${places}`, "down", `${places} place${places > 1 ? "s" : ""} lower than in ${otherRanker} (rank ${otherRank} there)`];
    } else {
      [text, kind, label] = ["=", "same", `same rank as in ${otherRanker}`];
    }
    return el("span", { class: `move move-${kind}`, role: "img", "aria-label": label, title: label, text });
  }

  function renderHit(hit, marker, status) {
    const item = el(
      "li",
      { class: "hit", "data-id": hit.id },
      el(
        "div",
        { class: "hit-head" },
        el("span", { class: "rank", "aria-hidden": "true", text: hit.rank }),
        el("a", { class: "hit-title", href: paperHref(hit.id), text: displayTitle(hit) }),
        marker
      ),
      el(
        "p",
        { class: "hit-meta" },
        `score ${number(hit.score, 4)} · BM25 rank ${hit.bm25_rank}`,
        idNote(hit) ? ` · ${hit.id}` : null
      ),
      snippetLine(hit)
    );
    if (hit.explanation) item.append(renderExplanation(hit.explanation, status));
    return item;
  }

  // The API decides which topics an explanation shows and in what order (largest
  // contribution first) and sums the others into `rest`: the page shows them as they come,
  // as the command line does, so the lines add up to the score they explain.
  //
  // When no query word has a vector (status query_out_of_vocabulary) the topics add 0 to the
  // score: the topic ranker's own score and its topics did not count, and are not shown.
  function renderExplanation(explanation, status) {
    const parts = Object.entries(explanation.parts);
    const scoreParts = parts.length > 1
      ? el(
          "p",
          { class: "hint score-parts" },
          `Score ${number(explanation.score, 4)} = ${parts.map(([label, value]) => `${label} ${number(value, 4)}`).join(" + ")}` +
            ` (topics: ${explanation.topic_ranker}'s score, as the fusion scales it).`
        )
      : null;
    if (status === "query_out_of_vocabulary") {
      return el(
        "details",
        { class: "explanation" },
        el("summary", { text: "Why: no query word has a word vector" }),
        scoreParts,
        el("p", {
          class: "hint topic-score",
          text: `No word of the query has a word vector, so the hidden topics add nothing to this score: ` +
            `${explanation.topic_ranker}'s own score and its topics are not used, and not listed.`,
        })
      );
    }
    const total = explanation.topics.length + explanation.rest.topics;
    const list = el("ol", { class: "topic-list" });
    for (const topic of explanation.topics) {
      list.append(
        el(
          "li",
          { class: "topic" },
          el(
            "p",
            { class: "topic-head" },
            el("strong", { text: topicLabel(explanation.topic_set, topic.topic) }),
            ` importance ${number(topic.importance, 3)} · relevance ${number(topic.relevance, 3)}`,
            topic.background ? ` − background ${number(topic.background, 3)}` : null,
            ` · adds ${signed(topic.contribution, 5)}`
          ),
          bar(topic.importance),
          el("p", { class: "words" }, el("span", { class: "label", text: "Topic words: " }), topic.topic_words.join(", ") || "—"),
          el("p", { class: "words" }, el("span", { class: "label", text: "Aligned query words: " }), topic.query_words.join(", ") || "—")
        )
      );
    }
    return el(
      "details",
      { class: "explanation" },
      el("summary", { text: `Why: ${explanation.topics.length} of ${total} topics` }),
      scoreParts,
      el(
        "p",
        { class: "hint topic-score" },
        `${explanation.topic_ranker} score ${number(explanation.topic_score, 5)} = the sum of its ${total} topics' contributions` +
          (explanation.rest.topics ? `; the ${explanation.topics.length} largest:` : ", largest first:")
      ),
      list,
      explanation.rest.topics
        ? el("p", { class: "hint topic-rest", text: `The other ${explanation.rest.topics} topics add ${signed(explanation.rest.contribution, 5)} together.` })
        : null
    );
  }

  function signed(value, digits) {
    return typeof value === "number" && value >= 0 ? `+${number(value, digits)}` : number(value, digits);
  }

  // --- live search, with click events when an experiment interleaves it -------------------

  // The last search asked for: an answer to an earlier one (a long abstract's, slower than the
  // few words typed after it) arrives too late to be shown under the box's query.
  let liveRequest = 0;

  async function runLive(event) {
    event.preventDefault();
    const query = byId("search-query").value.trim();
    const request = ++liveRequest; // a blank query, too, outdates the search before it
    const list = byId("search-hits");
    const meta = byId("search-meta");
    meta.replaceChildren();
    if (!query) {
      forgetLiveResults();
      list.replaceChildren();
      say("Type a query first.", "error");
      return;
    }
    say("Searching…", "busy");
    byId("event-status").textContent = "";
    const notice = byId("search-experiment");
    let result;
    try {
      result = await api("POST", "/search", { query, size: PAGE_SIZE, client_id: clientId(), snippets: true });
    } catch (error) {
      if (request !== liveRequest) return;
      forgetLiveResults();
      list.replaceChildren(el("li", { class: "problem", text: `Search failed: ${describe(error)}` }));
      say(`Search failed: ${describe(error)}`, "error");
      return;
    }
    if (request !== liveRequest) return;
    state.live = { queryId: result.query_id || null, clicks: 0, experiment: result.experiment || null };
    byId("click-status").textContent = "";
    if (state.live.queryId && state.live.experiment) {
      notice.hidden = false;
      updateLiveNotice();
    } else {
      notice.hidden = true;
      notice.textContent = "";
    }
    list.replaceChildren();
    const note = statusNote(result);
    if (note) meta.append(note);
    if (result.hits.length === 0) list.append(noHits(result));
    for (const hit of result.hits) {
      const link = el("a", { class: "hit-title", href: paperHref(hit.id), text: displayTitle(hit) });
      link.addEventListener("click", (clickEvent) => onLiveClick(clickEvent, hit));
      list.append(
        el(
          "li",
          { class: "hit", "data-id": hit.id },
          el("div", { class: "hit-head" }, el("span", { class: "rank", "aria-hidden": "true", text: hit.rank }), link),
          el("p", { class: "hit-meta", text: `BM25 rank ${hit.bm25_rank}${idNote(hit) ? ` · ${hit.id}` : ""}` }),
          snippetLine(hit)
        )
      );
    }
    say(`${result.hits.length} results${note ? ` (status ${result.status}: see above the list)` : ""}.`, "info");
  }

  // The list below held the last query's papers: left there, under a query that got no answer
  // (a blank one, a failed search), they read as its answer, and a click on one would count
  // for the last query's experiment.
  function forgetLiveResults() {
    state.live = { queryId: null, clicks: 0, experiment: null };
    const notice = byId("search-experiment");
    notice.hidden = true;
    notice.textContent = "";
    byId("click-status").textContent = "";
  }

  function updateLiveNotice() {
    const e = state.live.experiment;
    byId("search-experiment").textContent =
      `These results interleave ${e.rankers[0]} and ${e.rankers[1]} (experiment “${e.id}”, ${e.method}). ` +
      `Clicks recorded on this search: ${state.live.clicks}.`;
  }

  async function onLiveClick(event, hit) {
    const queryId = state.live.queryId;
    if (!queryId) return; // not part of an experiment: an ordinary link
    const newTab = event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0;
    const ubiEvent = {
      action_name: "click",
      query_id: queryId,
      client_id: clientId(),
      timestamp: new Date().toISOString(),
      event_attributes: { object: { object_id: hit.id, object_id_field: "_id" }, position: { ordinal: hit.rank } },
    };
    if (newTab) {
      // The page stays: send without waiting (keepalive lets it finish either way).
      fetch("/events", { method: "POST", keepalive: true, headers: { "Content-Type": "application/json" }, body: JSON.stringify(ubiEvent) });
      return;
    }
    event.preventDefault();
    let message;
    try {
      await api("POST", "/events", ubiEvent);
      state.live.clicks += 1;
      message = `Click recorded: ${displayTitle(hit)} at position ${hit.rank}.`;
    } catch (error) {
      if (error instanceof ApiFailure && error.status === 409) {
        message = `Click recorded already: ${displayTitle(hit)}.`;
      } else {
        message = `Click not recorded: ${describe(error)}`;
      }
    }
    updateLiveNotice();
    byId("click-status").textContent = message;
    byId("event-status").textContent = message;
    state.carryStatus = window.location.hash !== paperHref(hit.id);
    window.location.hash = paperHref(hit.id);
  }

  // --- one paper: topics and papers like it ---------------------------------------------

  let paperRequest = 0;

  // The last paper's parts, gone before another is shown (or none is).
  function clearPaper() {
    byId("view-paper").querySelector(".paper-id").textContent = "";
    byId("paper-excerpt").textContent = "";
    byId("paper-topics-set").textContent = "";
    byId("paper-topics").replaceChildren();
    byId("paper-similar").replaceChildren();
    byId("paper-similar-ranker").textContent = "";
  }

  // A paper link that names no paper: none shown, and why.
  function showNoPaper(message) {
    ++paperRequest; // a paper still loading is not shown over this
    byId("paper-title").textContent = "Paper not available";
    clearPaper();
    say(message, "error");
  }

  async function loadPaper(id) {
    const request = ++paperRequest;
    byId("paper-title").textContent = "Loading…";
    clearPaper();
    say("Loading the paper…", "busy");
    // The _doc form names every id, those the plain one leaves to the proxy (_search, ...) too.
    const path = "/documents/_doc/" + encodeURIComponent(id);
    const [paper, similar] = await Promise.allSettled([api("GET", path), api("GET", `${path}/similar?size=${PAGE_SIZE}`)]);
    if (request !== paperRequest) return; // another paper was asked for meanwhile
    if (paper.status === "rejected") {
      byId("paper-title").textContent = "Paper not available";
      say(`Cannot show ${id}: ${describe(paper.reason)}`, "error");
      return;
    }
    const doc = paper.value;
    byId("paper-title").textContent = displayTitle(doc);
    document.title = `${displayTitle(doc)} · reranker`;
    byId("view-paper").querySelector(".paper-id").textContent = `id ${doc.id}`;
    byId("paper-excerpt").textContent = doc.excerpt + (doc.truncated ? " …" : "");
    byId("paper-topics-set").textContent =
      doc.topic_set === "corrected"
        ? "Its corrected topics (the word vectors' common direction removed), which hidden_topics_corrected and its " +
          "fusions read; hidden_topics and hidden_topics_code read its uncorrected ones, so their numbers name other topics."
        : "Its uncorrected topics (Gong et al.'s), which hidden_topics and hidden_topics_code read: the index holds no " +
          "corrected topics of this paper.";
    const topics = byId("paper-topics");
    if (doc.topics.length === 0) topics.append(el("li", { class: "empty", text: "This paper has no topics (no word of it has a vector)." }));
    for (const topic of doc.topics.slice(0, 8)) {
      topics.append(
        el(
          "li",
          { class: "topic" },
          el("p", { class: "topic-head" }, el("strong", { text: topicLabel(doc.topic_set, topic.topic) }), ` importance ${number(topic.importance, 3)}`),
          bar(topic.importance),
          el("p", { class: "words", text: topic.words.join(", ") || "—" })
        )
      );
    }
    const list = byId("paper-similar");
    if (similar.status === "rejected") {
      list.append(el("li", { class: "problem", text: `Cannot find similar papers: ${describe(similar.reason)}` }));
    } else if (similar.value.hits.length === 0) {
      list.append(el("li", { class: "empty", text: "No other paper shares its words." }));
    } else {
      // The page names no ranker: the service's default orders the list, and the answer names it.
      byId("paper-similar-ranker").textContent = `Ordered by ${similar.value.ranker}, the service's default ranker.`;
      for (const hit of similar.value.hits) {
        list.append(
          el(
            "li",
            { class: "hit", "data-id": hit.id },
            el(
              "div",
              { class: "hit-head" },
              el("span", { class: "rank", "aria-hidden": "true", text: hit.rank }),
              el("a", { class: "hit-title", href: paperHref(hit.id), text: displayTitle(hit) })
            ),
            el("p", { class: "hit-meta", text: `score ${number(hit.score, 4)} · BM25 rank ${hit.bm25_rank}${idNote(hit) ? ` · ${hit.id}` : ""}` }),
            snippetLine(hit)
          )
        );
      }
    }
    say("", "info");
  }

  // --- experiments dashboard --------------------------------------------------------------

  let experimentsRequest = 0;

  async function loadExperiments(focusOn) {
    const request = ++experimentsRequest;
    const container = byId("experiments-list");
    say("Loading experiments…", "busy");
    let listed;
    try {
      listed = await api("GET", "/experiments");
    } catch (error) {
      if (request !== experimentsRequest) return;
      container.replaceChildren(el("p", { class: "problem", text: `Cannot list experiments: ${describe(error)}` }));
      say(`Cannot list experiments: ${describe(error)}`, "error");
      return;
    }
    const experiments = listed.experiments || [];
    const path = (e) => "/experiments/" + encodeURIComponent(e.id);
    const [reports, timelines] = await Promise.all([
      Promise.allSettled(experiments.map((e) => api("GET", path(e)))),
      Promise.allSettled(experiments.map((e) => api("GET", path(e) + "/timeline"))),
    ]);
    if (request !== experimentsRequest) return;
    container.replaceChildren();
    if (experiments.length === 0) {
      container.append(el("p", { class: "empty", text: "No experiments yet: start one above (with the admin key), or with `reranker ab create`." }));
    }
    // Newest first: the running or latest experiment is the one people come to see.
    experiments
      .map((experiment, i) => [experiment, reports[i], timelines[i]])
      .reverse()
      .forEach(([experiment, report, timeline]) => {
        const card = renderExperiment(experiment, report);
        container.append(card);
        // Drawn once the card is in the page, at the width it has there.
        card.querySelector(".experiment-plot").replaceWith(renderTimeline(experiment, timeline, card.clientWidth));
      });
    say(`${experiments.length} experiment${experiments.length === 1 ? "" : "s"}.`, "info");
    if (focusOn) {
      // The cards were rebuilt: put the focus back on the one just changed, and say what happened.
      const card = [...container.querySelectorAll(".experiment")].find((c) => c.dataset.experiment === focusOn.id);
      if (card) {
        card.querySelector(".form-result").textContent = focusOn.message;
        const heading = card.querySelector("h2");
        heading.setAttribute("tabindex", "-1");
        heading.focus();
      }
    }
  }

  function pValue(p) {
    if (typeof p !== "number") return "—";
    return p < 1e-4 ? "< 0.0001" : number(p, 4);
  }

  function field(name, label, value) {
    return [el("dt", { text: label }), el("dd", { "data-field": name, text: value })];
  }

  function renderExperiment(listed, fetched) {
    const experiment = fetched.status === "fulfilled" ? fetched.value.experiment || listed : listed;
    const report = fetched.status === "fulfilled" ? fetched.value.report : null;
    const titleId = `experiment-${experiment.id}`.replace(/[^A-Za-z0-9_-]/g, "_");
    const [a, b] = experiment.rankers;
    const card = el("section", { class: "experiment", "data-experiment": experiment.id, "aria-labelledby": titleId });
    card.append(
      el(
        "h2",
        { id: titleId },
        `Experiment “${experiment.id}” `,
        el("span", { class: `badge badge-${experiment.status}`, text: experiment.status })
      )
    );
    const facts = el("dl", { class: "facts" });
    append(facts, field("rankers", "Rankers", `${a} vs ${b} (${experiment.method})`));
    append(facts, field("traffic", "Traffic share", percent(experiment.traffic)));
    if (report) {
      // Searches, not trials: wins and ties count units (one client's searches of a text share coins, so one trial).
      append(facts, field("queries", "Searches interleaved", `${report.queries} (${report.queries_with_clicks} with clicks)`));
      append(facts, field("units", "Units with clicks", String(report.units_with_clicks ?? 0)));
      append(facts, field("min_units", "Units to decide", `${report.min_units} with a preference before a winner is named`));
      append(facts, field("clicks", "Clicks", String(report.clicks)));
      for (const name of experiment.rankers) append(facts, field(`wins-${name}`, `Wins for ${name}`, String((report.wins || {})[name] ?? 0)));
      append(facts, field("ties", "Ties", String(report.ties)));
      append(facts, field("winner", "Current winner", report.winner || "none yet"));
      append(facts, field("p_value", "p-value (always valid)", pValue(report.p_value)));
      // The exact test is for a team that fixed the size in advance and reads it once, there.
      append(facts, field("fixed_horizon_p_value", "p-value (one look at a planned size)", pValue(report.fixed_horizon_p_value)));
      append(facts, field("verdict", "Verdict", report.message || report.verdict));
      if ((report.removed_rankers || []).length) {
        append(facts, field("removed_rankers", "Removed rankers",
          `${report.removed_rankers.join(", ")}: not in this version of the service, so the experiment cannot run again (its report stays)`));
      }
    } else {
      append(facts, field("report", "Report", `unavailable: ${describe(fetched.reason)}`));
    }
    card.append(facts);
    card.append(el("div", { class: "experiment-plot" }));
    card.append(renderAdminForm(experiment, report ? report.removed_rankers || [] : []));
    return card;
  }

  function renderTimeline(experiment, fetched, width) {
    const figure = el("figure", { class: "plot experiment-plot" });
    if (fetched.status !== "fulfilled") {
      figure.append(el("p", { class: "problem", text: `The preference over time is unavailable: ${describe(fetched.reason)}` }));
      return figure;
    }
    const body = fetched.value;
    const [first, second] = experiment.rankers;
    if (body.periods.length === 0) {
      figure.append(el("figcaption", { class: "hint", text: "No clicked query yet: the preference over time appears with the first." }));
      return figure;
    }
    // Which way is which, as text that wraps (ranker names are long; the plot may be narrow).
    figure.append(
      el(
        "p",
        { class: "plot-legend" },
        el("span", { text: `▲ above 50%: ${first} preferred` }),
        el("span", { text: `▼ below: ${second} preferred` })
      )
    );
    // The card's padding and border are inside clientWidth; the plot takes the rest.
    figure.append(window.RerankerPlots.timeline(body, width - 34));
    const level = Math.round(body.confidence * 100);
    const shown = body.periods.filter((period) => period.cumulative.share !== null);
    if (shown.length === 1 && !window.RerankerPlots.isEmpty(shown[0].cumulative)) {
      // A band through time needs two points; one is drawn with its interval as an error bar.
      const only = shown[0].cumulative;
      figure.append(
        el("p", {
          class: "plot-single",
          text:
            `One ${body.interval} of preferences so far: the bar is its ${level}% always-valid interval, ` +
            `${Math.round(only.low * 100)}% to ${Math.round(only.high * 100)}%. The band, the interval through time, needs two or more ${body.interval}s.`,
        })
      );
    }
    const emptied = body.periods.find((period) => period.cumulative.share !== null && window.RerankerPlots.isEmpty(period.cumulative));
    if (emptied) {
      // The band would end there without a word; say what an empty interval means.
      const end = window.RerankerPlots.when(emptied.end, body.interval);
      figure.append(
        el("p", {
          class: "plot-empty",
          text:
            `By ${end} UTC the ${level}% always-valid interval was empty, and it stays so: no single share of preferences fits ` +
            `every moment of the experiment so far, so the band stops there. If the share never changed, this happens with chance ` +
            `at most ${100 - level}%; it also happens when the preference changed while the experiment ran (a ranker, the index ` +
            `or the traffic changed). The p-value still tests "no preference at all", but no one share describes the units any more: ` +
            `read the wins over time, and start a new experiment to measure the preference as it is now.`,
        })
      );
    }
    figure.append(
      el(
        "figcaption",
        { class: "hint" },
        `The share of the units with a preference (a client's query, or a query without a client id) that preferred ${first}, counted up to the end of each ` +
          `${body.interval} (UTC), with its ${level}% always-valid confidence band (a confidence sequence: it holds at every moment at once, ` +
          `so it is safe to watch and to stop at). The band leaves the dashed 50% line when the always-valid p-value falls to ` +
          `${((100 - level) / 100).toFixed(2)}; the report names a winner only after ${body.min_units} units with a preference.`
      )
    );
    return figure;
  }

  function renderAdminForm(experiment, removed) {
    const key = experiment.id.replace(/[^A-Za-z0-9_-]/g, "_");
    const result = el("p", { class: "form-result", role: "status", "aria-live": "polite" });
    // Any share the API takes (0.04% included): a step of 0.01 made the browser refuse 0.001 itself.
    const traffic = el("input", { id: `traffic-${key}`, type: "number", min: "0", max: "1", step: "any", value: experiment.traffic });
    const running = experiment.status === "running";
    const form = el(
      "form",
      { class: "experiment-form" },
      el("label", { for: `traffic-${key}`, text: "Traffic share (above 0, at most 1)" }),
      el(
        "div",
        { class: "form-row" },
        traffic,
        el("button", { type: "submit", text: "Update traffic" }),
        // A stopped experiment whose ranker is gone cannot run again: no button that can only be refused.
        (running || !removed.length) &&
          el("button", {
            type: "button",
            class: "secondary",
            text: running ? "Stop experiment" : "Resume experiment",
            onclick: () => changeExperiment(experiment.id, { status: running ? "stopped" : "running" }, result),
          }),
        // A running experiment cannot be deleted (409: stop it first): no button that can only be refused.
        !running &&
          el("button", {
            type: "button",
            class: "secondary",
            text: "Delete experiment",
            onclick: () => deleteExperiment(experiment.id, result),
          })
      ),
      result
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const share = Number(traffic.value);
      if (traffic.value.trim() === "" || !Number.isFinite(share) || share <= 0 || share > 1) {
        result.textContent = "The traffic share is a number above 0 and at most 1 (stop the experiment to send it no traffic).";
        traffic.focus();
        return;
      }
      changeExperiment(experiment.id, { traffic: share }, result);
    });
    return form;
  }

  // The admin key as typed (kept in this tab's session storage, sent only as a bearer
  // token), or null after asking for it in `result`.
  function adminKey(result) {
    const keyInput = byId("admin-key");
    const key = keyInput.value.trim();
    if (!key) {
      result.textContent = "Enter the admin API key first.";
      keyInput.focus();
      return null;
    }
    const store = storage("session");
    if (store) store.setItem(ADMIN_KEY, key);
    return key;
  }

  async function changeExperiment(id, change, result) {
    const key = adminKey(result);
    if (!key) return;
    result.textContent = "Saving…";
    try {
      await api("PATCH", "/experiments/" + encodeURIComponent(id), change, { Authorization: `Bearer ${key}` });
    } catch (error) {
      result.textContent = `Refused: ${describe(error)}`;
      return;
    }
    const what = "traffic" in change ? `traffic share ${percent(change.traffic)}` : `status ${change.status}`;
    await loadExperiments({ id, message: `Saved: ${what}.` });
  }

  // The page deletes an experiment with its shown queries and events (events=delete): kept, they
  // would hold its id and show on no card. `reranker ab delete` without --delete-events keeps them.
  async function deleteExperiment(id, result) {
    const key = adminKey(result);
    if (!key) return;
    const question = `Delete experiment “${id}”? Its shown queries and click events are deleted with it, and its report cannot be made again.`;
    if (!window.confirm(question)) {
      result.textContent = "Not deleted.";
      return;
    }
    result.textContent = "Deleting…";
    let deleted;
    try {
      deleted = await api("DELETE", "/experiments/" + encodeURIComponent(id) + "?events=delete", undefined, { Authorization: `Bearer ${key}` });
    } catch (error) {
      result.textContent = `Refused: ${describe(error)}`;
      return;
    }
    await loadExperiments();
    // Its card is gone: the status line says what happened, and the focus goes to the list's heading.
    const queries = `${deleted.queries} shown quer${deleted.queries === 1 ? "y" : "ies"}`;
    say(`Deleted “${id}” with its ${queries} and ${deleted.event_count} event${deleted.event_count === 1 ? "" : "s"}.`, "info");
    const heading = byId("experiments-title");
    heading.setAttribute("tabindex", "-1");
    heading.focus();
  }

  async function createExperiment(event) {
    event.preventDefault();
    const result = byId("create-result");
    const id = byId("create-id").value.trim();
    const rankers = await chosenRankers(["create-ranker-a", "create-ranker-b"], (text) => (result.textContent = text));
    if (!rankers) return;
    const traffic = Number(byId("create-traffic").value);
    const minUnits = Number(byId("create-min-units").value);
    // The service checks everything again; these catch what a browser's form would let through.
    let problem = null;
    if (!/^[a-z0-9][a-z0-9_-]{0,63}$/.test(id)) problem = ["create-id", "The name is 1-64 characters of a-z, 0-9, \"_\" and \"-\", starting with a letter or digit."];
    else if (rankers[0] === rankers[1]) problem = ["create-ranker-b", "Pick two different rankers."];
    else if (!(traffic > 0 && traffic <= 1)) problem = ["create-traffic", "The traffic share is a number above 0 and at most 1."];
    else if (!(Number.isInteger(minUnits) && minUnits >= 1)) problem = ["create-min-units", "The units to decide are a whole number, at least 1."];
    if (problem) {
      result.textContent = problem[1];
      byId(problem[0]).focus();
      return;
    }
    const key = adminKey(result);
    if (!key) return;
    result.textContent = "Starting…";
    const body = { id, rankers, method: byId("create-method").value, traffic, min_units: minUnits };
    try {
      await api("POST", "/experiments", body, { Authorization: `Bearer ${key}` });
    } catch (error) {
      result.textContent = `Refused: ${describe(error)}`;
      return;
    }
    result.textContent = `Started “${id}”: ${rankers[0]} vs ${rankers[1]} on ${percent(traffic)} of searches.`;
    byId("create-id").value = "";
    await loadExperiments({ id, message: "Started." });
  }

  // --- an evaluation report: its figures for the rankers compared, per-query wins and losses ---

  // A saved report: `reranker compare --json-file` (one baseline, "baseline") or
  // `reranker evaluate --json [--per-query]` (several, "baselines"). Its figures
  // ("results") are shown for the two rankers compared above; per_query is plotted.
  const savedReport = { body: null, name: "" };

  function readReport(body) {
    const results = body && typeof body === "object" ? body.results : null;
    const figures = Boolean(results && typeof results === "object" && Object.keys(results).length > 0);
    const perQuery = body && typeof body === "object" ? body.per_query : null;
    if (!perQuery || typeof perQuery !== "object" || Object.keys(perQuery).length < 2) {
      if (figures) return null; // figures to show, nothing to plot
      throw new Error(
        "it has no figures of any ranker (write one with `reranker compare ... --json-file FILE`, " +
          "or `reranker evaluate ... --json --per-query`)"
      );
    }
    const rankers = Object.keys(perQuery);
    const baselines = body.baseline ? [body.baseline] : (body.baselines || []).filter((name) => name in perQuery);
    const queries = Object.keys(perQuery[rankers[0]]);
    const metrics = queries.length ? Object.keys(perQuery[rankers[0]][queries[0]]) : [];
    if (queries.length === 0 || metrics.length === 0) throw new Error("its per-query figures are empty");
    return { rankers, baselines: baselines.length ? baselines : [rankers[0]], metrics };
  }

  async function openReport() {
    const input = byId("report-file");
    const summary = byId("report-summary");
    const file = input.files && input.files[0];
    byId("report-plot").replaceChildren();
    byId("report-controls").hidden = true;
    savedReport.body = null;
    drawFigures();
    if (!file) {
      summary.textContent = "";
      return;
    }
    let shape;
    try {
      const body = JSON.parse(await file.text());
      shape = readReport(body);
      savedReport.body = body;
      savedReport.name = file.name;
    } catch (error) {
      summary.textContent = `Cannot open ${file.name}: ${error instanceof SyntaxError ? `it is not JSON (${error.message})` : error.message}`;
      summary.dataset.kind = "error";
      return;
    }
    drawFigures();
    if (shape === null) {
      summary.textContent = `${file.name} has no per-query figures to plot (write it with \`reranker evaluate ... --json --per-query\`).`;
      summary.dataset.kind = "info";
      return;
    }
    const options = (names) => names.map((name) => el("option", { value: name, text: name }));
    const baseline = byId("report-baseline");
    const metric = byId("report-metric");
    baseline.replaceChildren(...options(shape.baselines));
    metric.replaceChildren(...options(shape.metrics));
    metric.value = shape.metrics.includes("ndcg@10") ? "ndcg@10" : shape.metrics[0];
    fillReportRankers();
    byId("report-controls").hidden = false;
    drawReport();
  }

  // The paired test's p-value between two rankers, when the report has it: `evaluate`
  // tests every pair, `compare` each ranker against its one baseline.
  function pBetween(body, left, right, metric) {
    const tested = body.p_values || {};
    if (body.baseline) {
      if (left === body.baseline) return (tested[right] || {})[metric];
      if (right === body.baseline) return (tested[left] || {})[metric];
      return undefined;
    }
    return ((tested[left] || {})[right] || {})[metric] ?? ((tested[right] || {})[left] || {})[metric];
  }

  // The report's figures for the rankers in the left and right columns, beside the live comparison.
  function drawFigures() {
    const panel = byId("report-figures");
    const body = savedReport.body;
    const results = body && body.results && typeof body.results === "object" ? body.results : null;
    if (!results || Object.keys(results).length === 0) {
      panel.hidden = true;
      panel.replaceChildren();
      return;
    }
    const [left, right] = [byId("compare-left").value, byId("compare-right").value];
    const name = body.dataset || savedReport.name;
    panel.hidden = false;
    const missing = [...new Set([left, right])].filter((ranker) => !results[ranker] || typeof results[ranker] !== "object");
    if (missing.length) {
      panel.replaceChildren(el("p", {
        class: "note",
        text: `The report on ${name} has no figures of ${missing.join(" or ")}; it has ${Object.keys(results).join(", ")}. ` +
          "Choose two of them as the left and right rankers above.",
      }));
      return;
    }
    const metrics = (Array.isArray(body.metrics) ? body.metrics : Object.keys(results[left]))
      .filter((metric) => typeof results[left][metric] === "number" && typeof results[right][metric] === "number");
    const rows = metrics.map((metric) => {
      const [a, b] = [results[left][metric], results[right][metric]];
      return el("tr", { "data-metric": metric },
        el("th", { scope: "row", text: metric }),
        el("td", { class: a > b ? "better" : null, text: number(a, 3) }),
        el("td", { class: b > a ? "better" : null, text: number(b, 3) }),
        el("td", { text: left === right ? "—" : pValue(pBetween(body, left, right, metric)) }));
    });
    const judgments = body.judgments || (body.config || {}).judgments;
    const caption = `${name}` + (typeof body.queries === "number" ? `, ${body.queries} judged queries` : "") +
      (judgments ? ` (judgments: ${judgments})` : "") + `: ${left} and ${right}`;
    const notes = [];
    if (body.baseline && left !== right && left !== body.baseline && right !== body.baseline) {
      notes.push(`This report tests each ranker against ${body.baseline} only: no p-value between ${left} and ${right}.`);
    }
    if (body.significance_test) notes.push(`p: ${body.significance_test}. The larger figure of each row is in bold.`);
    panel.replaceChildren(
      el("table", {},
        el("caption", { text: caption }),
        el("thead", {}, el("tr", {},
          el("th", { scope: "col", text: "Metric" }), el("th", { scope: "col", text: left }),
          el("th", { scope: "col", text: right }), el("th", { scope: "col", text: "p" }))),
        el("tbody", {}, ...rows)),
      ...notes.map((note) => el("p", { class: "note", text: note })));
  }

  function fillReportRankers() {
    const select = byId("report-ranker");
    const others = Object.keys(savedReport.body.per_query).filter((name) => name !== byId("report-baseline").value);
    const kept = select.value;
    select.replaceChildren(...others.map((name) => el("option", { value: name, text: name })));
    if (others.includes(kept)) select.value = kept;
  }

  function drawReport() {
    const body = savedReport.body;
    if (!body) return;
    const [ranker, baseline, metric] = ["report-ranker", "report-baseline", "report-metric"].map((id) => byId(id).value);
    const summary = byId("report-summary");
    const reference = body.per_query[baseline];
    const rows = Object.keys(reference)
      .filter((query) => body.per_query[ranker][query] && typeof body.per_query[ranker][query][metric] === "number")
      .map((query) => ({ query, value: body.per_query[ranker][query][metric], reference: reference[query][metric] }));
    const deltas = rows.map((row) => row.value - row.reference);
    // Ties within 1e-12, as reranker.evaluation counts them.
    const wins = deltas.filter((d) => d > 1e-12).length;
    const losses = deltas.filter((d) => d < -1e-12).length;
    const ties = rows.length - wins - losses;
    const mean = deltas.reduce((a, b) => a + b, 0) / Math.max(1, rows.length);
    const p = (body.baseline ? (body.p_values || {})[ranker] : ((body.p_values || {})[baseline] || {})[ranker]) || {};
    const test = typeof p[metric] === "number" ? `; p ${p[metric] < 1e-4 ? "< 0.0001" : `= ${p[metric].toPrecision(2)}`} by ${body.significance_test || "a paired test"}` : "";
    const text =
      `${ranker} against ${baseline} on ${body.dataset || savedReport.name}, ${metric}: ` +
      `${wins} wins, ${ties} ties, ${losses} losses over ${rows.length} queries; mean Δ ${signed(mean, 3)}${test}.`;
    summary.textContent = text;
    summary.dataset.kind = "info";
    const plot = byId("report-plot");
    if (plot.clientWidth === 0) return; // its view is hidden: keep the plot drawn for the width it had
    plot.replaceChildren(window.RerankerPlots.deltas(rows, plot.clientWidth, { summary: text, metric }));
  }

  // --- wiring ----------------------------------------------------------------------

  function start() {
    byId("compare-form").addEventListener("submit", runCompare);
    byId("compare-query").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        byId("compare-form").requestSubmit();
      }
    });
    byId("search-form").addEventListener("submit", runLive);
    // An abstract is one paragraph: Enter searches (as in a one-line box), Shift+Enter breaks the line.
    byId("search-query").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        byId("search-form").requestSubmit();
      }
    });
    byId("admin-form").addEventListener("submit", (event) => event.preventDefault());
    const store = storage("session");
    const keyInput = byId("admin-key");
    if (store) keyInput.value = store.getItem(ADMIN_KEY) || "";
    keyInput.addEventListener("change", () => {
      if (store) store.setItem(ADMIN_KEY, keyInput.value.trim());
    });
    byId("admin-forget").addEventListener("click", () => {
      keyInput.value = "";
      if (store) store.removeItem(ADMIN_KEY);
      say("The admin key is forgotten.", "info");
    });
    byId("experiments-refresh").addEventListener("click", () => loadExperiments());
    byId("create-form").addEventListener("submit", createExperiment);
    // The browser's own checks (a field's min, step or type) stop a start before it is sent, and
    // say why beside the field: the last start's result would read as this one's.
    byId("create-form").addEventListener("invalid", () => { byId("create-result").textContent = ""; }, true);
    byId("report-file").addEventListener("change", openReport);
    byId("report-baseline").addEventListener("change", () => {
      fillReportRankers();
      drawReport();
    });
    byId("report-ranker").addEventListener("change", drawReport);
    byId("report-metric").addEventListener("change", drawReport);
    byId("compare-left").addEventListener("change", drawFigures);
    byId("compare-right").addEventListener("change", drawFigures);
    // The plots are drawn at their container's width: draw them again when it changes.
    // (Only a new width: phones resize the height as their address bar comes and goes.)
    let resizeTimer = null;
    let drawnWidth = window.innerWidth;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        if (window.innerWidth === drawnWidth) return;
        drawnWidth = window.innerWidth;
        drawReport();
        if (!byId("view-experiments").hidden) loadExperiments();
      }, 250);
    });
    byId("skip-link").addEventListener("click", (event) => {
      event.preventDefault();
      byId("main").focus();
    });
    window.addEventListener("hashchange", () => route(true));
    route(false);
    rankersListed = initRankers().catch((error) => say(`Cannot list the rankers: ${describe(error)}`, "error"));
  }

  start();
})();
