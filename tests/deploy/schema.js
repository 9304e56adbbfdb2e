#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// schema.js FILE... - every Kubernetes object in the YAML files (or "-" for standard input, e.g.
// a kustomize rendering) validated offline against the Kubernetes API's schemas, as npm's
// kubernetes-models carries them (pinned by scripts/deps, with js-yaml, in
// /usr/local/lib/weightd-test). Unknown fields, wrong types and missing required fields fail;
// a kind the models do not know fails too. kustomization.yaml is kustomize's, not the API's: it is
// skipped here and checked by rendering it. Prints "N passed, N failed".
"use strict";
const fs = require("fs");
const path = require("path");
const prefix = process.env.WD_NODE_PREFIX || "/usr/local/lib/weightd-test";
const req = (m) => require(path.join(prefix, "node_modules", m));
const yaml = req("js-yaml");

let passed = 0;
let failed = 0;

function model(apiVersion, kind) {
  // "v1" -> kubernetes-models/v1, "apps/v1" -> kubernetes-models/apps/v1
  let mod;
  try {
    mod = req(path.join("kubernetes-models", apiVersion));
  } catch (e) {
    return null;
  }
  return mod[kind] || null;
}

function check(where, doc) {
  if (doc.kind === "Kustomization") return;
  const M = model(doc.apiVersion, doc.kind);
  if (!M) {
    console.log(`FAIL: ${where}: no schema for ${doc.apiVersion} ${doc.kind}`);
    failed++;
    return;
  }
  try {
    new M(doc).validate();
    console.log(`ok: ${where}: ${doc.apiVersion} ${doc.kind} ${doc.metadata && doc.metadata.name}`);
    passed++;
  } catch (e) {
    const errs = (e.errors || []).map((x) => `${x.instancePath} ${x.message}` +
      (x.params && x.params.additionalProperty ? ` (${x.params.additionalProperty})` : ""));
    console.log(`FAIL: ${where}: ${doc.kind} ${doc.metadata && doc.metadata.name}: ` +
      (errs.length ? errs.join("; ") : e.message));
    failed++;
  }
}

for (const f of process.argv.slice(2)) {
  const text = fs.readFileSync(f === "-" ? 0 : f, "utf8");
  let docs;
  try {
    docs = yaml.loadAll(text);
  } catch (e) {
    console.log(`FAIL: ${f} does not parse: ${e.message}`);
    failed++;
    continue;
  }
  docs.forEach((d, i) => {
    if (d != null) check(`${f === "-" ? "stdin" : path.basename(f)}[${i}]`, d);
  });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed || !passed ? 1 : 0);
