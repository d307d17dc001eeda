// A node-redlock worker for redislock's Redlock interoperability tests.
//
// For a given number of seconds it takes a Redlock lock (node-redlock 4,
// the npm package "redlock") on a resource over N masters, and inside each
// critical section does a read-modify-write of a counter key on another
// Redis (GET, a short sleep, SET n+1), so that two holders at once lose an
// update.  It also counts holders in a second key ("<counter>:inside",
// INCR on entry, DECR on exit): a value above 1 on entry is an overlap seen
// directly.  Other workers, and PostgreSQL sessions using redislock on the
// same masters and resource, may do the same at once.
//
// At the end it prints one JSON line:
//   {"worker":"w1","sections":N,"overlaps":N,"lock_failures":N,
//    "late":N,"unlock_failures":N}
// where lock_failures counts attempts that did not get the lock (the worker
// tries again after a random delay below --retry-delay) and late counts
// critical sections that ended after the lock's validity.
//
// Install node-redlock and ioredis somewhere outside the repository, then
// point NODE_PATH at it:
//   npm install --prefix /tmp/redlock-npm redlock@4 ioredis@5
//   NODE_PATH=/tmp/redlock-npm/node_modules node test/node/redlock_worker.js \
//     --masters '127.0.0.1:20030, 127.0.0.1:20031, 127.0.0.1:20032' \
//     --resource lock:counter --counter 127.0.0.1:20033/counter --seconds 5
//
// Options: --masters (as RedisMasters' endpoints), --resource (the lock's
// key), --counter HOST:PORT/KEY, --seconds (run time, 5), --ttl (lease in
// ms, 1000), --hold-ms (sleep inside a section, 2), --password (for every
// Redis), --worker (a name for the report), --retry-delay (ms, 20).
//
// With --once try or --once hold (no --counter needed) it makes one attempt
// instead and prints {"worker":"w1","locked":true|false,"value":...};
// "try" releases what it got at once, "hold" keeps it until its standard
// input ends, then releases it and prints {"worker":"w1","unlocked":true}.
'use strict';

const Redis = require('ioredis');
const Redlock = require('redlock');

// Parse "--name value" pairs into an object, with defaults.
function parseArgs(argv) {
	const opts = {
		seconds: '5', ttl: '1000', 'hold-ms': '2', worker: `w${process.pid}`,
		'retry-delay': '20',
	};
	for (let i = 0; i < argv.length; i += 2) {
		if (!argv[i].startsWith('--') || argv[i + 1] === undefined)
			throw new Error(`bad argument: ${argv[i]}`);
		opts[argv[i].slice(2)] = argv[i + 1];
	}
	for (const name of ['masters', 'resource', ...(opts.once ? [] : ['counter'])])
		if (!opts[name]) throw new Error(`--${name} is required`);
	if (opts.once && !['try', 'hold'].includes(opts.once))
		throw new Error(`--once must be try or hold, not ${opts.once}`);
	return opts;
}

// An ioredis client for "host:port", failing fast instead of queueing
// commands while a Redis is down (a killed master must not stall a worker).
function client(endpoint, password) {
	const [host, port] = endpoint.trim().split(':');
	return new Redis({
		host, port: Number(port), password,
		enableOfflineQueue: false,
		maxRetriesPerRequest: 0,
		connectTimeout: 500,
		commandTimeout: 500,
		retryStrategy: () => 100,
	}).on('error', () => {});
}

// Resolve once the client is ready, or after a second (its Redis may be down).
function ready(c) {
	return new Promise((resolve) => {
		if (c.status === 'ready') return resolve();
		c.once('ready', resolve);
		setTimeout(resolve, 1000);
	});
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// One attempt (--once): report whether the lock was granted; hold it until
// standard input ends if asked to, then release it.
async function once(opts, redlock) {
	let lock = null;
	try {
		lock = await redlock.lock(opts.resource, Number(opts.ttl));
	} catch (err) {
		lock = null;
	}
	console.log(JSON.stringify({
		worker: opts.worker, locked: lock !== null, value: lock ? lock.value : null,
	}));
	if (!lock) return;
	if (opts.once === 'hold') {
		await new Promise((resolve) => {
			process.stdin.on('end', resolve);
			process.stdin.resume();
		});
	}
	await lock.unlock();
	if (opts.once === 'hold')
		console.log(JSON.stringify({ worker: opts.worker, unlocked: true }));
}

async function main() {
	const opts = parseArgs(process.argv.slice(2));
	const masters = opts.masters.split(',').map((e) => client(e, opts.password));
	if (opts.once) {
		const redlock = new Redlock(masters, { retryCount: 0 });
		redlock.on('clientError', () => {});
		await Promise.all(masters.map(ready));
		await once(opts, redlock);
		for (const c of masters) c.disconnect();
		return;
	}
	const [counterAt, counterKey] = opts.counter.split('/');
	const counter = client(counterAt, opts.password);
	const insideKey = `${counterKey}:inside`;
	const redlock = new Redlock(masters, {
		retryCount: 0, retryDelay: Number(opts['retry-delay']), retryJitter: 10,
	});
	// node-redlock reports each master's errors here; a dead master is expected.
	redlock.on('clientError', () => {});

	const report = {
		worker: opts.worker, sections: 0, overlaps: 0, lock_failures: 0,
		late: 0, unlock_failures: 0,
	};
	const ttl = Number(opts.ttl);
	const deadline = Date.now() + Number(opts.seconds) * 1000;
	await Promise.all([...masters, counter].map(ready));

	while (Date.now() < deadline) {
		let lock;
		try {
			lock = await redlock.lock(opts.resource, ttl);
		} catch (err) {
			report.lock_failures++;
			await sleep(Math.random() * Number(opts['retry-delay']));
			continue;
		}
		if (await counter.incr(insideKey) !== 1) report.overlaps++;
		const value = Number(await counter.get(counterKey) || 0);
		await sleep(Number(opts['hold-ms']));
		await counter.set(counterKey, value + 1);
		await counter.decr(insideKey);
		report.sections++;
		if (Date.now() > lock.expiration) report.late++;
		await lock.unlock().catch(() => { report.unlock_failures++; });
	}

	console.log(JSON.stringify(report));
	for (const c of [...masters, counter]) c.disconnect();
}

main().catch((err) => {
	console.error(err.stack || String(err));
	process.exit(1);
});
