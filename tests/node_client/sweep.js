// Runs one sweep through twin.rpc.v1.SweepService using only the .proto files (no generated code).
//
//   node sweep.js HOST:PORT SPEC_JSON_FILE [ROWS_PER_MESSAGE]
//        -> prints {"rows": [...], "messages": {...}, "finished": {...}} as JSON
//
// Rows come many to a `rows` event (or, when ROWS_PER_MESSAGE is 1, one to a deprecated
// `row` event); both are read, so every row is printed once, in the order it arrived.
"use strict";

const fs = require("fs");
const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const PROTO_ROOT = path.resolve(__dirname, "..", "..", "proto");
const definition = protoLoader.loadSync("twin/rpc/v1/sweep_service.proto", {
  includeDirs: [PROTO_ROOT],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true, // the oneof's name ("event", "outcome") holds the name of the field that is set
});
const v1 = grpc.loadPackageDefinition(definition).twin.rpc.v1;

function brief(row) {
  const out = { index: row.index, outcome: row.outcome };
  if (row.outcome === "estimate") out.step_time_s = row.estimate.step_time_s;
  else if (row.outcome === "error") out.error = { code: row.error.code, field: row.error.field };
  return out;
}

function main() {
  const [address, specFile, perMessage] = process.argv.slice(2);
  if (!address || !specFile) {
    console.error("usage: node sweep.js HOST:PORT SPEC_JSON_FILE [ROWS_PER_MESSAGE]");
    process.exit(2);
  }
  const client = new v1.SweepService(address, grpc.credentials.createInsecure());
  const request = { spec_document: fs.readFileSync(specFile, "utf8"), rows_per_message: Number(perMessage || 0) };
  const call = client.Sweep(request, { deadline: new Date(Date.now() + 60000) });
  const rows = [];
  const messages = {};
  let finished = null;
  call.on("data", (event) => {
    messages[event.event] = (messages[event.event] || 0) + 1;
    if (event.event === "rows") for (const row of event.rows.rows) rows.push(brief(row));
    else if (event.event === "row") rows.push(brief(event.row));
    else if (event.event === "finished") finished = event.finished;
  });
  call.on("error", (err) => {
    console.error(JSON.stringify({ code: err.code, details: err.details }));
    process.exit(1);
  });
  call.on("end", () => {
    client.close();
    process.stdout.write(JSON.stringify({ rows, messages, finished }) + "\n");
  });
}

main();
