package annals.interop;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;

import org.apache.pekko.Done;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.Props;
import org.apache.pekko.actor.typed.SpawnProtocol;
import org.apache.pekko.actor.typed.javadsl.AskPattern;

/**
 * The benchmark modes of Main, timed inside the JVM: its start, the actor system's and a first
 * recovery of an empty id (which connects the journal's session) are not counted. Each prints one line per measurement to stdout:
 *
 * <pre>
 *   bench-write KEYSPACE PREFIX N M TAGS P  write-ms MS events N*M   (P lines)
 *       P passes one after another; in pass p, N Tally entities PREFIX-p-0 .. PREFIX-p-(N-1), all
 *       at once, each persisting M events one after another (each Add waits for its write); MS
 *       runs from the first spawn to the last reply, the entities' recoveries of their new ids
 *       included. The first pass also warms the JVM up.
 *   bench-recover KEYSPACE PID K           recover-ms MS events E   (K lines)
 *       K recoveries of PID one after another, each a new Tally actor answering Get; MS runs from
 *       the spawn to the reply (the recovery of every event). The actor is stopped after each.
 * </pre>
 */
final class Bench {
  private static final Duration TIMEOUT = Duration.ofSeconds(60);

  private Bench() {}

  static int write(String keyspace, String prefix, int n, int m, Set<String> tags, int passes) throws Exception {
    ActorSystem<SpawnProtocol.Command> system =
        ActorSystem.create(SpawnProtocol.create(), "bench", Main.config(keyspace));
    try {
      warmUp(system, prefix + "-warmup");
      for (int pass = 0; pass < passes; pass++) {
        long start = System.nanoTime();
        List<CompletableFuture<Done>> chains = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
          String pid = prefix + "-" + pass + "-" + i;
          CompletionStage<Done> chain = spawnAsync(system, new Tally(pid, tags), "w-" + pass + "-" + i).thenApply(cart -> {
            CompletionStage<Done> adds = CompletableFuture.completedFuture(Done.getInstance());
            for (int j = 0; j < m; j++) {
              String item = "i" + j;
              adds = adds.thenCompose(d -> AskPattern.<Tally.Command, Done>ask(
                  cart, r -> new Tally.Add(item, r), TIMEOUT, system.scheduler()));
            }
            return adds;
          }).thenCompose(adds -> adds);
          chains.add(chain.toCompletableFuture());
        }
        CompletableFuture.allOf(chains.toArray(new CompletableFuture[0]))
            .get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        System.out.println("write-ms " + ms + " events " + (long) n * m);
      }
      return 0;
    } finally {
      terminate(system);
    }
  }

  /**
   * Recovers pid (an id without events) in an actor, then stops it: the journal plugin's session
   * is connected and its statements prepared before the timing starts, as the Go side's store is
   * opened before its own.
   */
  private static void warmUp(ActorSystem<SpawnProtocol.Command> system, String pid) throws Exception {
    ActorRef<Tally.Command> cart = spawn(system, new Tally(pid, Set.of()), "warmup");
    AskPattern.<Tally.Command, Long>ask(cart, Tally.Get::new, TIMEOUT, system.scheduler())
        .toCompletableFuture().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
    AskPattern.<Tally.Command, Done>ask(cart, Tally.Stop::new, TIMEOUT, system.scheduler())
        .toCompletableFuture().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
  }

  static int recover(String keyspace, String pid, int k) throws Exception {
    ActorSystem<SpawnProtocol.Command> system =
        ActorSystem.create(SpawnProtocol.create(), "bench", Main.config(keyspace));
    try {
      warmUp(system, pid + "-warmup");
      for (int i = 0; i < k; i++) {
        long start = System.nanoTime();
        ActorRef<Tally.Command> cart = spawn(system, new Tally(pid, Set.of()), "r-" + i);
        long events = AskPattern.<Tally.Command, Long>ask(cart, Tally.Get::new, TIMEOUT, system.scheduler())
            .toCompletableFuture().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        long us = TimeUnit.NANOSECONDS.toMicros(System.nanoTime() - start);
        System.out.printf("recover-ms %.3f events %d%n", us / 1000.0, events);
        AskPattern.<Tally.Command, Done>ask(cart, Tally.Stop::new, TIMEOUT, system.scheduler())
            .toCompletableFuture().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
      }
      return 0;
    } finally {
      terminate(system);
    }
  }

  private static <T> ActorRef<T> spawn(ActorSystem<SpawnProtocol.Command> system,
      org.apache.pekko.actor.typed.Behavior<T> behavior, String name) throws Exception {
    return spawnAsync(system, behavior, name).toCompletableFuture().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
  }

  private static <T> CompletionStage<ActorRef<T>> spawnAsync(ActorSystem<SpawnProtocol.Command> system,
      org.apache.pekko.actor.typed.Behavior<T> behavior, String name) {
    return AskPattern.<SpawnProtocol.Command, ActorRef<T>>ask(system,
        r -> new SpawnProtocol.Spawn<>(behavior, name, Props.empty(), r), TIMEOUT, system.scheduler());
  }

  private static void terminate(ActorSystem<?> system) throws Exception {
    system.terminate();
    system.getWhenTerminated().toCompletableFuture().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
  }
}
