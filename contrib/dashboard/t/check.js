'use strict';
// The unit tests' TAP lines: check(name, fn) runs fn and prints "ok N -
// name", or "not ok N - name" and the first lines of what it threw;
// done() exits 1 if any check failed, else 0.

let n = 0, failures = 0;

function check(name, fn) {
	n++;
	try {
		fn();
		console.log(`ok ${n} - ${name}`);
	} catch (e) {
		failures++;
		console.log(`not ok ${n} - ${name}`);
		console.log(String(e.stack || e).split('\n').slice(0, 8).map((l) => `# ${l}`).join('\n'));
	}
}

function done() {
	process.exit(failures ? 1 : 0);
}

module.exports = { check, done };
