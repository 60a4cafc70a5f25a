// A Redisson client (node-redisson, a port of Redisson's RLock that sends
// Redisson's scripts and uses its channel) driven line by line, for
// tests/redisson.rs. Reads commands on stdin, one per line, and prints one
// line per event on stdout, each with the time in ms since the epoch:
//   lock NAME         -> "locked NAME <ms>" (waits, watchdog lease)
//   trylock NAME MS   -> "trylock NAME true|false <ms>" (waits at most MS)
//   unlock NAME       -> "unlocked NAME <ms>", or "error NAME <message>"
//   force NAME        -> "forced NAME true|false <ms>"
//   quit
// One lock object per name, so re-entries are the same owner.
// Usage: node client.js PORT
const readline = require('readline');
const { Redisson } = require('node-redisson');

const port = Number(process.argv[2]);
const redisson = new Redisson({ redis: { options: { host: '127.0.0.1', port } } });
const locks = new Map();
const lockOf = (name) => {
  if (!locks.has(name)) locks.set(name, redisson.getLock(name));
  return locks.get(name);
};
const say = (line) => process.stdout.write(`${line} ${Date.now()}\n`);

async function main() {
  const rl = readline.createInterface({ input: process.stdin });
  say('ready -');
  // One command at a time, in order.
  for await (const line of rl) {
    const [cmd, name, arg] = line.trim().split(/\s+/);
    try {
      if (cmd === 'lock') {
        await lockOf(name).lock();
        say(`locked ${name}`);
      } else if (cmd === 'trylock') {
        const got = await lockOf(name).tryLock(BigInt(arg), true);
        say(`trylock ${name} ${got}`);
      } else if (cmd === 'unlock') {
        await lockOf(name).unlock();
        say(`unlocked ${name}`);
      } else if (cmd === 'force') {
        const done = await lockOf(name).forceUnlock();
        say(`forced ${name} ${done}`);
      } else if (cmd === 'quit') {
        break;
      }
    } catch (e) {
      process.stdout.write(`error ${name} ${String(e.message).split('\n')[0]}\n`);
    }
  }
  await redisson.quit();
  process.exit(0);
}

main();
