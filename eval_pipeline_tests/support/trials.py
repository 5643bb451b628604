"""A trial's steps as a campaign runs them, on any sandbox: preparing an instance's environment, then
generating and evaluating."""


def prepare_on(sandbox, benchmark, instance):
    return sandbox.prepare(instance, benchmark.environment_for(instance), benchmark.source)


def resolve_trial(instance, agent, seed, environment, sandbox, store, benchmark):
    """A trial's generation and its evaluation (tests at most 300 s), as a campaign runs them."""
    from eval_pipeline.trial.evaluation import evaluate
    from eval_pipeline.trial.generation import generate

    generation = generate(instance, agent, seed, environment, sandbox, store)
    evaluation = evaluate(instance, benchmark.environment_for(instance), generation, environment, sandbox, store, 300)
    return generation, evaluation
