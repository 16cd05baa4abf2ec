// The README's example, compiled by tsc so it cannot drift from the API (not run by the tests: it needs Kafka).
import { Emitter, ResearchReportBuilder } from "../index";

export async function example(pageBytes: Buffer): Promise<void> {
  const emitter = new Emitter(); // config from the environment (README)
  const report = new ResearchReportBuilder("what changed in Quill 2.0")
    .addSource({ sourceRef: "https://example.org/notes", data: pageBytes, status: 200, contentType: "text/html" })
    .addClaim({ statement: "2.0 is faster.", citations: [{ sourceRef: "https://example.org/notes", quote: "twice as fast" }] });
  const landed = await emitter.publish({ runId: "run-42", stageId: "research-0", role: "scout", result: report.build() });
  console.log(landed.topic, landed.partition, landed.offset);
  await emitter.closeRun("run-42"); // a signed RunClose.v2: the scheduler seals the run
  await emitter.close();
}
