// mempp web page: the as-of sliders, the timeline's movable as-of line, drag-and-drop upload.
// Plain script, no framework; every page works without it (the forms submit as usual).
"use strict";

function dayAfter(first, n) {
  const d = new Date(first + "T00:00:00Z");
  d.setUTCDate(d.getUTCDate() + n);
  return d.toISOString().slice(0, 10);
}

function daysBetween(first, day) {
  return Math.round((Date.parse(day + "T00:00:00Z") - Date.parse(first + "T00:00:00Z")) / 86400000);
}

// A range input over the scope's days drives a date field; releasing it searches again.
function setupAsOfSlider(slider) {
  const target = document.getElementById(slider.dataset.target);
  const form = slider.dataset.submit ? document.getElementById(slider.dataset.submit) : null;
  const first = slider.dataset.first;
  let timer = null;
  slider.addEventListener("input", () => {
    const day = dayAfter(first, Number(slider.value));
    target.value = day;
    slider.setAttribute("aria-valuetext", day);
  });
  slider.addEventListener("change", () => {
    if (!form) return;
    clearTimeout(timer);
    timer = setTimeout(() => form.requestSubmit(), 350);
  });
  target.addEventListener("change", () => {
    if (!target.value) return;
    const n = daysBetween(first, target.value);
    if (n >= 0 && n <= Number(slider.max)) slider.value = String(n);
  });
}

// The timeline's as-of line follows its slider; versions dated after it are greyed.
function setupTimeline(chart) {
  const slider = document.getElementById(chart.dataset.slider);
  const line = chart.querySelector(".as-of-line");
  const label = chart.querySelector(".as-of-label");
  const output = document.getElementById(chart.dataset.output);
  const link = document.getElementById(chart.dataset.link);
  if (!slider || !line) return;
  const first = chart.dataset.first;
  const span = Number(chart.dataset.span);
  const left = Number(chart.dataset.left);
  const right = Number(chart.dataset.right);
  function move() {
    const n = Number(slider.value);
    const day = dayAfter(first, n);
    const x = span > 0 ? left + (right - left) * n / span : (left + right) / 2;
    line.setAttribute("x1", x);
    line.setAttribute("x2", x);
    line.removeAttribute("visibility");
    if (label) { label.setAttribute("x", x + 4); label.textContent = "as of " + day; }
    for (const point of chart.querySelectorAll(".version")) {
      point.classList.toggle("after", point.dataset.date > day);
    }
    slider.setAttribute("aria-valuetext", day);
    if (output) output.textContent = day;
    if (link) {
      const url = new URL(link.href);
      url.searchParams.set("as_of", day);
      link.href = url.toString();
    }
  }
  slider.addEventListener("input", move);
  if (chart.dataset.hasAsOf === "1") move();
}

// Dropped or chosen files are sent with a progress bar; the server answers with the report.
function setupUpload(form) {
  const drop = document.getElementById("drop");
  const input = document.getElementById("files");
  const bar = document.getElementById("progress");
  const status = document.getElementById("upload-status");
  const report = document.getElementById("report");
  for (const name of ["dragenter", "dragover"]) {
    drop.addEventListener(name, (event) => { event.preventDefault(); drop.classList.add("over"); });
  }
  for (const name of ["dragleave", "drop"]) {
    drop.addEventListener(name, () => drop.classList.remove("over"));
  }
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    input.files = event.dataTransfer.files;
    showChosen();
  });
  input.addEventListener("change", showChosen);
  function showChosen() {
    const names = Array.from(input.files).map((f) => f.name);
    status.textContent = names.length ? names.length + " file(s): " + names.join(", ") : "";
  }
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!input.files.length) { status.textContent = "Choose or drop at least one file."; return; }
    const request = new XMLHttpRequest();
    request.open("POST", form.action);
    request.setRequestHeader("X-Mempp-Fragment", "1");
    bar.hidden = false;
    bar.value = 0;
    request.upload.addEventListener("progress", (e) => {
      if (e.lengthComputable) {
        bar.value = Math.round(100 * e.loaded / e.total);
        status.textContent = "Sending… " + bar.value + "%";
      }
    });
    request.upload.addEventListener("load", () => { status.textContent = "Storing…"; });
    request.addEventListener("load", () => {
      bar.value = 100;
      const type = request.getResponseHeader("content-type") || "";
      if (type.includes("json")) {  // refused before the page saw it (e.g. the size limit)
        let detail = "the server refused the upload";
        try { detail = JSON.parse(request.responseText).detail || detail; } catch (e) { /* keep */ }
        report.replaceChildren();
        const note = document.createElement("div");
        note.className = "notice bad";
        note.setAttribute("role", "alert");
        note.textContent = detail;
        report.append(note);
      } else {
        report.innerHTML = request.responseText;  // the server's own rendered report
      }
      status.textContent = request.status === 200 ? "Done." : "Not stored.";
      form.reset();
    });
    request.addEventListener("error", () => { status.textContent = "The upload failed (network)."; });
    request.send(new FormData(form));
  });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("input[type=range][data-target]").forEach(setupAsOfSlider);
  document.querySelectorAll(".timeline[data-slider]").forEach(setupTimeline);
  const upload = document.getElementById("upload-form");
  if (upload) setupUpload(upload);
});
