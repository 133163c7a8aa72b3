// Calls twin.rpc.v1.TwinService over gRPC using only the .proto files (no generated code).
//
//   node predict.js HOST:PORT            -> prints {"ok": {...estimate...}, "bad": {code, details}} as JSON
//
// The first call asks by preset names in one line; the second sends a bad plan and
// reports the status the server answers with.
"use strict";

const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const PROTO_ROOT = path.resolve(__dirname, "..", "..", "proto");
const definition = protoLoader.loadSync("twin/rpc/v1/twin_service.proto", {
  includeDirs: [PROTO_ROOT],
  keepCase: true, // field names exactly as in the .proto (step_time_s, ...)
  longs: Number,
  enums: String,
  defaults: true, // every field present in the output, zero values included
  oneofs: true,
});
const v1 = grpc.loadPackageDefinition(definition).twin.rpc.v1;

function call(client, method, request) {
  return new Promise((resolve) => {
    const deadline = new Date(Date.now() + 15000);
    client[method](request, { deadline }, (err, response) => {
      resolve(err ? { error: { code: err.code, details: err.details } } : { response });
    });
  });
}

async function main() {
  const address = process.argv[2];
  if (!address) {
    console.error("usage: node predict.js HOST:PORT");
    process.exit(2);
  }
  const client = new v1.TwinService(address, grpc.credentials.createInsecure());
  const scenario = {
    name: "node",
    cluster: { system: "DGX-H100", num_gpus: 1024 },
    model: { preset: "llama3.1-70b" },
    plan: { tp: 4, pp: 4, vp: 5, gbs: 1024, precision: "PRECISION_BF16" },
  };
  const ok = await call(client, "Predict", { scenario });
  const bad = await call(client, "Predict", { scenario: { ...scenario, plan: { tp: 3, gbs: 1024 } } });
  client.close();
  if (ok.error) {
    console.error(JSON.stringify(ok.error));
    process.exit(1);
  }
  process.stdout.write(JSON.stringify({ ok: ok.response.estimate, bad: bad.error || null }) + "\n");
}

main();
