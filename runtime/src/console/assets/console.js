// The live part of the console: /console/live follows the calls as they start and end, over
// server-sent events. Every other page works without this script.
"use strict";

function cell(row, name, text) {
  const td = document.createElement("td");
  if (name) td.className = name;
  td.textContent = text;
  row.appendChild(td);
  return td;
}

function hidden(name, value) {
  const input = document.createElement("input");
  input.type = "hidden";
  input.name = name;
  input.value = value;
  return input;
}

function cancelForm(call, csrf) {
  const form = document.createElement("form");
  form.method = "post";
  form.action = "/console/live/cancel";
  const button = document.createElement("button");
  button.type = "submit";
  button.className = "cancel";
  button.textContent = "Cancel";
  form.append(hidden("csrf", csrf), hidden("replica", call.replica), hidden("id", String(call.id)), button);
  return form;
}

function showCall(table, call) {
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  let row = rows.find((r) => r.dataset.call === String(call.id) && r.dataset.replica === call.replica);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.call = String(call.id);
    row.dataset.replica = call.replica;
    row.dataset.started = String(call.started_ms);
    cell(row, "replica", call.replica);
    cell(row, "", String(call.id));
    cell(row, "principal", call.principal);
    cell(row, "tool", call.tool);
    cell(row, "started", new Date(call.started_ms).toTimeString().slice(0, 8));
    cell(row, "duration", "running");
    cell(row, "outcome", "");
    cell(row, "", "").appendChild(cancelForm(call, table.dataset.csrf));
    body.insertBefore(row, body.firstChild);
  }
  if (call.ended) {
    row.querySelector(".duration").textContent = call.ended.duration_ms.toFixed(1) + " ms";
    const outcome = row.querySelector(".outcome");
    outcome.dataset.outcome = call.ended.outcome;
    outcome.textContent = call.ended.outcome + (call.ended.error ? ": " + call.ended.error : "");
    const form = row.querySelector("form");
    if (form) form.remove();
  }
  while (body.rows.length > 200) body.deleteRow(body.rows.length - 1);
}

function follow(table) {
  const state = document.getElementById("live-state");
  const events = new EventSource("/console/live/events");
  events.addEventListener("open", () => { state.textContent = "Following."; });
  events.addEventListener("call", (event) => showCall(table, JSON.parse(event.data)));
  events.addEventListener("missed", () => {
    state.textContent = "Fell behind; reloading.";
    window.location.reload();
  });
  events.addEventListener("error", () => { state.textContent = "Reconnecting…"; });
}

document.addEventListener("DOMContentLoaded", () => {
  const table = document.getElementById("live-calls");
  if (table) follow(table);
});
