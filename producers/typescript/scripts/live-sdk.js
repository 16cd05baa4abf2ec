// Publishes one stage of every kind the TypeScript builders make, through the library API
// (used by scripts/live-check.sh; env as for the emit command). Prints one line per stage.
const sdk = require("../dist/index.js");

async function main() {
  const runId = process.argv[2];
  const emitter = new sdk.Emitter();
  const page = Buffer.from("<html><body><p>Quill 2.0 is twice as fast as 1.9.</p></body></html>");
  const report = new sdk.ResearchReportBuilder("what changed in Quill 2.0")
    .addSource({ sourceRef: "https://example.org/notes", data: page, status: 200, contentType: "text/html" })
    .addClaim({ statement: "2.0 is faster.", citations: [{ sourceRef: "https://example.org/notes", quote: "twice as fast" }] });
  const data = new sdk.DataOpsActivity(runId, "rollup-0", emitter.signer, "data");
  data.addInput("orders.csv", Buffer.from("region,amount\neu,3\n"));
  data.plan(["sum amount by region"]);
  data.addOutput("totals.csv", Buffer.from("eu,3\n"));
  const ops = new sdk.DataOpsActivity(runId, "deploy-0", emitter.signer, "ops");
  ops.addInput("config.before", Buffer.from("replicas=1\n"));
  const stages = [
    ["research-0", "scout", report.build()],
    ["research-1", "scout", sdk.researchAbort("failure", "q", ["https://example.org/x"], { code: "HTTP_ERROR", source: "https://example.org/x", message: "404", status: 404 })],
    ["rollup-0", "analyst", data.finish()],
    ["deploy-0", "operator", ops.refusedResult("UNSAFE_CHANGE", "replicas=0 refused")],
    ["code-9", "developer", sdk.codingResult("--- a\n+++ b\n", [{ path: "b.py", data: Buffer.from("print(1)\n") }])],
  ];
  for (const [stageId, role, result] of stages) {
    const landed = await emitter.publish({ runId, stageId, role, result });
    console.log(`${stageId} published at ${landed.topic}[${landed.partition}]@${landed.offset}`);
  }
  await emitter.close();
}

main().catch((exc) => {
  console.error(`live-sdk: ${exc.code ?? ""} ${exc.message}`);
  process.exitCode = 3;
});
