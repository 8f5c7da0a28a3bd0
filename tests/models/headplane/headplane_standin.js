// Headplane's stand-in in the lab's kubelet (tests/support/kube_lab_pods.py): no Headplane build exists on this
// machine, so its container runs this under `node` (its /proc/PID/comm is `node`, as the real one's). It does what the
// lease and the backup need to see of Headplane: it starts only when its config file is there (after a fence the
// kubelet mounts a directory in its place), answers /admin/healthz on PORT, and commits a row to its SQLite database
// every 200 ms (WAL mode, through the sqlite3 CLI, so that Litestream replicates it) before logging it to WRITE_LOG
// as "POD UPTIME": an acknowledged write.
"use strict";
const fs = require("fs");
const http = require("http");
const { execFileSync } = require("child_process");

const config = process.env.HEADPLANE_CONFIG;
if (!fs.existsSync(config) || !fs.statSync(config).isFile()) {
  console.error(`no config file at ${config}: not serving`);
  process.exit(1);
}
const db = process.env.HEADPLANE_DB;
execFileSync("sqlite3", [db, "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS writes (pod TEXT, at REAL);"]);

function uptime() {
  return fs.readFileSync("/proc/uptime", "utf8").split(" ")[0];
}

setInterval(() => {
  const at = uptime();
  execFileSync("sqlite3", [db, `INSERT INTO writes VALUES ('${process.env.POD}', ${at});`]);
  fs.appendFileSync(process.env.WRITE_LOG, `${process.env.POD} ${at}\n`);
}, 200);

http
  .createServer((request, response) => {
    response.writeHead(request.url === "/admin/healthz" ? 200 : 404);
    response.end();
  })
  .listen(Number(process.env.PORT), "127.0.0.1");

process.on("SIGTERM", () => process.exit(0));
