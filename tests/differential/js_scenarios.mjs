// Scenarios of the JavaScript NATS client, run the same way against nats-server and the
// rayjet gateway: each prints what a user would observe (counts, values, error texts),
// free of ids and times, as one JSON document (see clients.py).
//
//   node js_scenarios.mjs <nats url> <prefix> <scenario>...
import { connect } from "@nats-io/transport-node";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";

const [url, prefix, ...wanted] = process.argv.slice(2);
// a user of the server's configuration when NATS_USER / NATS_PASSWORD are set
const nc = await connect({ servers: url, timeout: 10000,
                           ...(process.env.NATS_USER ? { user: process.env.NATS_USER,
                                                         pass: process.env.NATS_PASSWORD }
                                                     : {}) });
const jsm = await jetstreamManager(nc, { timeout: 20000 });
const js = jetstream(nc, { timeout: 20000 });
const N = 300;

function failure(e) {
  // what a user's code can tell apart: the error's class, the API error's codes and text
  if (e && typeof e.apiError === "function") {
    const api = e.apiError();
    return { name: e.name, code: api.code, err_code: api.err_code,
             description: api.description };
  }
  return { name: e && e.name, error: String((e && e.message) || e) };
}

async function stream(name) {
  await jsm.streams.add({ name, subjects: [name + ".>"] });
  const acks = [];
  for (let i = 0; i < N; i++) acks.push(js.publish(name + ".m", "m" + i));
  return (await Promise.all(acks)).at(-1).seq;
}

const scenarios = {
  // consume() asks for heartbeats of half its expiry and pulls again as it goes
  async consume() {
    const name = prefix + "_CONSUME";
    const last = await stream(name);
    await jsm.consumers.add(name, { durable_name: "C", ack_policy: AckPolicy.Explicit });
    const c = await js.consumers.get(name, "C");
    const msgs = await c.consume({ max_messages: 100 });
    const seqs = [];
    const stop = setTimeout(() => msgs.stop(), 30000);
    for await (const m of msgs) {
      seqs.push(m.seq);
      m.ack();
      if (seqs.length >= N) break;
    }
    clearTimeout(stop);
    // each once (the order of overlapping pulls' messages through the gateway is not yet
    // nats-server's: see the README's JavaScript client paragraph)
    const eachOnce = [...seqs].sort((a, b) => a - b).every((s, i) => s === i + 1);
    return { last, consumed: seqs.length, eachOnce };
  },

  async fetch() {
    const name = prefix + "_FETCH";
    await stream(name);
    await jsm.consumers.add(name, { durable_name: "F", ack_policy: AckPolicy.Explicit });
    const c = await js.consumers.get(name, "F");
    const got = [];
    for (const max of [50, 50]) {
      const it = await c.fetch({ max_messages: max, expires: 5000 });
      for await (const m of it) { got.push(m.seq); await m.ackAck(); }
    }
    const info = await c.info();
    return { fetched: got.length, first: got[0], last: got.at(-1),
             ackFloor: info.ack_floor.stream_seq, pending: info.num_pending };
  },

  async ordered() {
    const name = prefix + "_ORDERED";
    await stream(name);
    const c = await js.consumers.get(name);
    const it = await c.fetch({ max_messages: 120, expires: 5000 });
    const seqs = [];
    for await (const m of it) seqs.push(m.seq);
    return { got: seqs.length, first: seqs[0], last: seqs.at(-1) };
  },

  async kv() {
    const kvm = new Kvm(nc);
    const kv = await kvm.create(prefix + "_kv", { history: 5, ttl: 60000 });
    const r1 = await kv.put("a.b", "1");
    const r2 = await kv.put("a.b", "2");
    await kv.put("c", "3");
    const e = await kv.get("a.b");
    await kv.delete("c");
    const keys = [];
    for await (const k of await kv.keys()) keys.push(k);
    const hist = [];
    for await (const h of await kv.history({ key: "a.b" })) hist.push([h.operation, h.string()]);
    let conflict;
    try { await kv.update("a.b", "x", r1); } catch (err) { conflict = failure(err); }
    const st = await kv.status();
    return { revisions: [r1, r2], value: e.string(), keys: keys.sort(), hist, conflict,
             status: { bucket: st.bucket, values: st.values, history: st.history, ttl: st.ttl,
                       metadata: st.metadata } };
  },

  async obj() {
    const objm = new Objm(nc);
    const os = await objm.create(prefix + "_obj");
    const data = new Uint8Array(300000).map((_, i) => (i * 7) % 251);
    const info = await os.putBlob({ name: "blob", description: "d" }, data);
    const back = await os.getBlob("blob");
    const names = [];
    for (const o of await os.list()) names.push(o.name);
    await os.delete("blob");
    let gone;
    try { gone = await os.getBlob("blob"); } catch (err) { gone = failure(err); }
    return { size: info.size, chunks: info.chunks, same: back.length === data.length &&
             back.every((v, i) => v === data[i]), names, gone };
  },

  // which fields a stream's create and info answers carry (clients read some by presence)
  async shapes() {
    const name = prefix + "_SHAPES";
    const created = await jsm.streams.add({ name, subjects: [name + ".>"] });
    await js.publish(name + ".a", "x");
    const info = await jsm.streams.info(name);
    const listed = [];
    for await (const si of jsm.streams.list(name + ".>")) listed.push(si.config.metadata);
    const consumer = await jsm.consumers.add(name, { durable_name: "S", metadata: { a: "b" } });
    const keys = (o) => Object.keys(o || {}).sort();
    return { created: keys(created), didCreate: created.did_create,
             createdConfig: keys(created.config), createdState: keys(created.state),
             info: keys(info).filter((k) => k !== "cluster"), config: keys(info.config),
             state: keys(info.state), compression: info.config.compression,
             allowDirect: info.config.allow_direct, maxAge: info.config.max_age,
             // _nats.* levels: the answers about one stream or consumer carry the server's
             metadata: [created.config.metadata, info.config.metadata, listed,
                        consumer.config.metadata] };
  },

  async errors() {
    const name = prefix + "_ERRORS";
    await stream(name);
    const out = {};
    const tries = {
      missingStream: () => jsm.streams.info(prefix + "_NOPE"),
      missingConsumer: () => jsm.consumers.info(name, "nope"),
      deleteTwice: async () => { await jsm.streams.deleteMessage(name, 3);
                                 return jsm.streams.deleteMessage(name, 3); },
      missingMessage: () => jsm.streams.getMessage(name, { seq: 3 }),
      pastTheEnd: () => jsm.streams.deleteMessage(name, N + 10),
      emptyCreate: async () => {
        const r = await nc.request(`$JS.API.STREAM.CREATE.${prefix}_EMPTY`, "");
        const doc = JSON.parse(new TextDecoder().decode(r.data));
        if (doc.error) throw Object.assign(new Error(doc.error.description),
                                           { name: "RawError", apiError: () => doc.error });
        return "a value";
      },
    };
    for (const [k, f] of Object.entries(tries)) {
      try { out[k] = { answer: (await f()) === null ? null : "a value" }; }
      catch (err) { out[k] = failure(err); }
    }
    return out;
  },
};

const out = {};
for (const s of wanted) {
  try { out[s] = await scenarios[s](); } catch (e) { out[s] = { failed: failure(e) }; }
}
console.log(JSON.stringify(out));
await nc.close();
