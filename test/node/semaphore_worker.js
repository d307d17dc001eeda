// A redis-semaphore worker for redislock's semaphore interoperability test.
//
// For a given number of seconds it takes permits of a semaphore (the npm
// package "redis-semaphore": its Semaphore for one permit, its
// MultiSemaphore for more) and inside each critical section counts the
// permits it holds in a counter key on another Redis (INCRBY on entry,
// DECRBY on exit): a value above the limit on entry means that more permits
// were held at once than the semaphore allows.  PostgreSQL sessions using
// redis_semaphore_acquire() on the same semaphore count theirs in the same
// key.
//
// At the end it prints one JSON line:
//   {"worker":"w1","sections":N,"over_limit":N,"max_inside":N,
//    "acquire_failures":N}
// where acquire_failures counts attempts that did not get the permits
// within --acquire-ms.
//
// Install redis-semaphore and ioredis somewhere outside the repository,
// then point NODE_PATH at it:
//   npm install --prefix /tmp/semaphore-npm redis-semaphore@5 ioredis@5
//   NODE_PATH=/tmp/semaphore-npm/node_modules node test/node/semaphore_worker.js \
//     --redis 127.0.0.1:20040 --name jobs --limit 3 --permits 2 \
//     --counter 127.0.0.1:20041/inside --seconds 5
//
// Options: --redis HOST:PORT (the semaphore's), --name (redis-semaphore
// keeps it at "semaphore:<name>"), --limit, --permits (1: Semaphore, more:
// MultiSemaphore), --counter HOST:PORT/KEY, --seconds (run time, 5),
// --lock-ms (the lease, 10000), --hold-ms (sleep inside a section, 5),
// --acquire-ms (how long an attempt may wait, 2000), --worker (a name).
'use strict';

const Redis = require('ioredis');
const { Semaphore, MultiSemaphore } = require('redis-semaphore');

// Parse "--name value" pairs into an object, with defaults.
function parseArgs(argv) {
	const opts = {
		seconds: '5', 'lock-ms': '10000', 'hold-ms': '5', 'acquire-ms': '2000',
		permits: '1', worker: `w${process.pid}`,
	};
	for (let i = 0; i < argv.length; i += 2) {
		if (!argv[i].startsWith('--') || argv[i + 1] === undefined)
			throw new Error(`bad argument: ${argv[i]}`);
		opts[argv[i].slice(2)] = argv[i + 1];
	}
	for (const name of ['redis', 'name', 'limit', 'counter'])
		if (!opts[name]) throw new Error(`--${name} is required`);
	return opts;
}

function client(endpoint) {
	const [host, port] = endpoint.split(':');
	return new Redis({ host, port: Number(port), maxRetriesPerRequest: 1 });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
	const opts = parseArgs(process.argv.slice(2));
	const limit = Number(opts.limit);
	const permits = Number(opts.permits);
	const redis = client(opts.redis);
	const [counterEndpoint, counterKey] = opts.counter.split('/');
	const counter = client(counterEndpoint);
	const options = {
		lockTimeout: Number(opts['lock-ms']),
		acquireTimeout: Number(opts['acquire-ms']),
		retryInterval: 5,
	};
	const report = {
		worker: opts.worker, sections: 0, over_limit: 0, max_inside: 0,
		acquire_failures: 0,
	};
	const end = Date.now() + Number(opts.seconds) * 1000;

	while (Date.now() < end) {
		const semaphore = permits === 1 ?
			new Semaphore(redis, opts.name, limit, options) :
			new MultiSemaphore(redis, opts.name, limit, permits, options);
		if (!(await semaphore.tryAcquire())) {
			report.acquire_failures++;
			continue;
		}
		const inside = await counter.incrby(counterKey, permits);
		report.max_inside = Math.max(report.max_inside, inside);
		if (inside > limit)
			report.over_limit++;
		await sleep(Math.random() * Number(opts['hold-ms']) * 2);
		await counter.decrby(counterKey, permits);
		await semaphore.release();
		report.sections++;
	}
	console.log(JSON.stringify(report));
	redis.disconnect();
	counter.disconnect();
}

main().catch((err) => {
	console.error(err);
	process.exit(1);
});
