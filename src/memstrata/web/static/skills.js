// The skills view: the spec's list (name, description, enabled). A switch saves at once;
// if the request fails the switch goes back and says why, on the skill itself.

import { api, reason } from "./api.js";
import { $, banner, bdi, cjkLang, el } from "./dom.js";

const pending = new Set();
let status = "none"; // none, loading, loaded, failed

export async function load() {
  const list = $("skill-list");
  status = "loading";
  list.setAttribute("aria-busy", "true");
  $("skills-retry").hidden = true;
  try {
    const { data } = await api("GET", "api/config/skills");
    banner($("skills-message"), data.skills.length ? "" : "No skills are installed on this server.");
    list.replaceChildren(...data.skills.map(item));
    status = "loaded";
  } catch (error) {
    status = "failed";
    list.replaceChildren();
    const retry = error.status === 0 ? "" : " Press Retry to try again.";
    banner($("skills-message"), ["Could not load the skills. ", ...reason(error), retry], "error");
    $("skills-retry").hidden = false;
  } finally {
    list.setAttribute("aria-busy", "false");
  }
}

/** The skills view was opened (again): read the list again, so that a switch flipped
 * meanwhile elsewhere (the agent's skill_set, the REST API, another tab) shows its state
 * now, and a list that failed to load is retried. Not while a switch is saving: its answer
 * belongs to the list on screen. */
export function opened() {
  if (status !== "loading" && !pending.size) load();
}

/** Sign-out: nothing of this user's list stays in the page. */
export function reset() {
  status = "none";
  $("skill-list").replaceChildren();
  banner($("skills-message"), "");
  $("skills-retry").hidden = true;
}

export function wire() {
  $("skills-retry").addEventListener("click", load);
}

/** The description in the page's language: the English one (`description_en`) on a page in
 * English when the skill has one, else the spec's `description` (in whatever language it is
 * written: the builtin skills' is Chinese), `lang` set for its pronunciation and fonts. */
function description(skill) {
  const english = /^en\b/i.test(document.documentElement.lang);
  if (english && skill.description_en) return { text: skill.description_en, lang: "en" };
  return { text: skill.description || "(no description)", lang: cjkLang(skill.description || "") };
}

function item(skill) {
  const id = `skill-${skill.name}`;
  const described = description(skill);
  const toggle = el("button", {
    type: "button", role: "switch", class: "switch", id: `${id}-switch`,
    "aria-checked": String(skill.enabled), "aria-labelledby": `${id}-name`,
    "aria-describedby": `${id}-desc ${id}-error`,
  }, el("span", { class: "knob", "aria-hidden": "true" }));
  const error = el("p", { class: "skill-error", id: `${id}-error`, role: "alert", hidden: true });
  const li = el("li", { class: "skill", id, "data-skill": skill.name },
    el("div", { class: "skill-text" },
      // a bdi (and dir=auto): the name's letters cannot reorder the category after it
      el("bdi", { class: "skill-name mono", id: `${id}-name` }, skill.name),
      el("span", { class: "badge", dir: "auto" }, skill.category),
      // dir=auto: a Hebrew or Arabic description reads right to left
      el("p", { class: "skill-desc", id: `${id}-desc`, dir: "auto", lang: described.lang }, described.text),
      error),
    toggle);
  toggle.addEventListener("click", () => flip(skill.name, toggle, error, li));
  return li;
}

async function flip(name, toggle, error, li) {
  if (pending.has(name)) return;
  const wanted = toggle.getAttribute("aria-checked") !== "true";
  pending.add(name);
  toggle.setAttribute("aria-checked", String(wanted)); // optimistic
  toggle.setAttribute("aria-busy", "true");
  error.hidden = true;
  li.classList.remove("rolled-back");
  try {
    const { data } = await api("PUT", `api/config/skills/${encodeURIComponent(name)}`, {
      body: { enabled: wanted },
    });
    toggle.setAttribute("aria-checked", String(data.enabled));
  } catch (failure) {
    toggle.setAttribute("aria-checked", String(!wanted));
    error.replaceChildren("Could not turn ", bdi(name), ` ${wanted ? "on" : "off"}. `,
      ...reason(failure), ` It is ${wanted ? "off" : "on"} again.`);
    error.hidden = false;
    void li.offsetWidth; // restart the highlight animation on a repeated failure
    li.classList.add("rolled-back");
  } finally {
    toggle.removeAttribute("aria-busy");
    pending.delete(name);
  }
}
