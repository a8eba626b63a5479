"""Bad inputs of `gelulab identify` and `gelulab swap`: each row is (argv after `gelulab`, the exit code, a regular
expression the first line of stderr matches). Every row is refused before anything is written: identify writes
nothing, and swap checks its options before it touches --out. The cases that need files (a model folder with an
impossible config.json, a link out of the folder) are in tests/test_swap.py.
"""
from __future__ import annotations

_RESTRICTED = r".* is not accepted in an identify expression .*; --allow-python evaluates it as Python, which runs " \
              r"arbitrary code$"

IDENTIFY_SWAP_CASES = [
    # identify: the user's callable fails on the probe
    (["identify", "lambda x: 1/0"], 2,
     (r"^gelulab identify: error: 'lambda x: 1/0': the callable raised ZeroDivisionError: division by zero on a "
     r"float32 numpy array of shape \(2,\)$")),
    # identify: a power, shift or product of literals beyond 4096 bits, a list repeated beyond 10**6 items, refused
    # before anything runs (nested powers slip past the bound on each exponent)
    (["identify", "lambda x: numpy.maximum(x, [0.0] * (2**16 * 2**16 * 2**16 * 4))"], 2,
     (r"^gelulab identify: error: .*: '\[0\.0\] \* \(2 \*\* 16 \* 2 \*\* 16 \* 2 \*\* 16 \* 4'\.\.\. \(1 × "
      r"1125899906842624 = 1125899906842624 items; .* at most 1000000 items, ")),
    (["identify", "((((((((2**16)**16)**16)**16)**16)**16)**16)**16)"], 2,
     r"^gelulab identify: error: .*: '\(\(2 \*\* 16\) \*\* 16\) \*\* 16' \(at least 4097 bits; .* at most 4096 bits"),
    (["identify", "lambda x: ((((((((2**16)**16)**16)**16)**16)**16)**16)**16) * x"], 2,
     r"^gelulab identify: error: .*: '\(\(2 \*\* 16\) \*\* 16\) \*\* 16' \(at least 4097 bits"),
    (["identify", "pow(pow(2, 16), 16) ** 16"], 2, r"^gelulab identify: error: .*\(at least 4097 bits"),
    (["identify", "lambda x: x * (((2**16)**16)**15 * (2**16)**16)"], 2,
     r"^gelulab identify: error: .*\(about 4098 bits"),
    (["identify", "((2**16)**16)**15" + " << 16" * 16], 2, r"^gelulab identify: error: .*\(4097 bits"),
    (["identify", "[0]*10**9"], 2,
     r"^gelulab identify: error: .*: '\[0\] \* 10 \*\* 9' \(1 × 1000000000 = 1000000000 items"),
    (["identify", "'ab' * 10**6 + 'c'"], 2, r"^gelulab identify: error: .*\(2 × 1000000 = 2000000 items"),
    # identify: a power or shift whose size has no bound is refused before anything runs
    (["identify", "lambda x: 9**9**9"], 2,
     (r"^gelulab identify: error: 'lambda x: 9\*\*9\*\*9': \*\* with the right operand '9 \*\* 9' \(a power or shift "
      r"takes a number literal of at most 16")),
    (["identify", "lambda x: pow(9, pow(9, 9))"], 2, r"^gelulab identify: error: .*: pow\(\) with the right operand "),
    (["identify", "lambda x: x * (1 << 10**9)"], 2,
     r"^gelulab identify: error: .*: << with the right operand '10 \*\* 9'"),
    (["identify", "lambda x: x(1)"], 2,
     r"^gelulab identify: error: 'lambda x: x\(1\)': a call of the parameter 'x' \(only the listed functions"),
    (["identify", "(lambda f: f(f(f(f(f(f(f(f(2)))))))))(lambda y: y ** 16)"], 2,
     r"^gelulab identify: error: .*: a call of a lambda \(only the listed functions"),
    (["identify", "lambda x: (lambda y: y * 2)(x)"], 2, r"^gelulab identify: error: .*: a call of a lambda "),
    # identify: expressions outside the restricted form (nothing is imported or run)
    (["identify", "__import__('os').system('touch X')"], 2,
     r"^gelulab identify: error: \"__import__\('os'\)\.system\('touch X'\)\": the name '__import__'" + _RESTRICTED),
    (["identify", "os.system('touch X')"], 2, r"^gelulab identify: error: .*: the name 'os'" + _RESTRICTED),
    (["identify", "open('X', 'w')"], 2, r"^gelulab identify: error: .*: the name 'open'" + _RESTRICTED),
    (["identify", "numpy.load('x.npy', allow_pickle=True)"], 2,
     r"^gelulab identify: error: .*: the dotted name 'numpy\.load' \(not one of the ufuncs of numpy" + _RESTRICTED),
    (["identify", "lambda x: x.__class__"], 2,
     r"^gelulab identify: error: .*: the attribute '__class__'" + _RESTRICTED),
    (["identify", "lambda x: x.no_such_method()"], 2,
     r"^gelulab identify: error: .*: the attribute 'no_such_method' of the parameter 'x'" + _RESTRICTED),
    (["identify", "gelulab.cli.main"], 2,
     r"^gelulab identify: error: 'gelulab\.cli\.main': the dotted name 'gelulab\.cli\.main'" + _RESTRICTED),
    # identify: file, code and environment access found by testing, refused before anything runs
    (["identify", ("keras.layers.Lambda.from_config({'function': {'class_name': '__lambda__', 'config': "
                   "{'code': '4wEAAAAA'}}}, safe_mode=False)")], 2,
     r"^gelulab identify: error: .*: the dotted name 'keras\.layers\.Lambda\.from_config'" + _RESTRICTED),
    (["identify", "transformers.AutoConfig.from_pretrained('no_such_folder', trust_remote_code=True)"], 2,
     r"^gelulab identify: error: .*: the dotted name 'transformers\.AutoConfig\.from_pretrained'" + _RESTRICTED),
    (["identify", "lambda x: float(np.genfromtxt('/tmp/secret.txt', dtype='U64'))"], 2,
     r"^gelulab identify: error: .*: the string '/tmp/secret\.txt' \(strings have at most 32" + _RESTRICTED),
    (["identify", "lambda x: float(np.fromregex('secret.txt', 'x', 'U9'))"], 2,
     r"^gelulab identify: error: .*: the dotted name 'numpy\.fromregex'" + _RESTRICTED),
    (["identify", "lambda x: float('{0.__globals__[os].environ[FOO_SECRET]}'.format(np.genfromtxt))"], 2,
     r"^gelulab identify: error: .*: the string '\{0\.__globals__\[os\]" + _RESTRICTED),
    (["identify", "tf.print('PWNED', output_stream='file:///tmp/PWNED')"], 2,
     r"^gelulab identify: error: .*: the dotted name 'tensorflow\.print'" + _RESTRICTED),
    (["identify", "lambda x: np.lib.stride_tricks.as_strided(x, (2**40,), (0,))"], 2,
     r"^gelulab identify: error: .*: the dotted name 'numpy\.lib\.stride_tricks\.as_strided'" + _RESTRICTED),
    (["identify", "lambda x: " + "-" * 3000 + "x"], 2,
     (r"^gelulab identify: error: 'lambda x: -+'\.\.\. has 3011 characters; expected an identify expression of at "
      r"most 1000$")),
    (["identify", "1+" * 20000 + "1"], 2,
     (r"^gelulab identify: error: '(1\+)+'\.\.\. has 40001 characters; expected an identify expression of at most "
      r"1000$")),
    (["identify", "lambda x: " + "-" * 989 + "x"], 2,
     r"^gelulab identify: error: 'lambda x: -+'\.\.\.: expression too deeply nested$"),
    (["identify", "[f for f in ()]"], 2, r"^gelulab identify: error: .*: a list comprehension" + _RESTRICTED),
    (["identify", "torch.nn.GELU("], 2, r"^gelulab identify: error: 'torch\.nn\.GELU\(' is not a Python expression"),
    (["identify", "3"], 2, r"^gelulab identify: error: '3' gives a int, not a callable$"),
    # swap: options bounded as moons' are, refused before any model work
    (["swap", "--finetune", "--lr", "inf"], 2,
     r"^gelulab swap: error: --lr inf: expected a finite number > 0 \(Adam's learning rate, default 1e-4\)$"),
    (["swap", "--finetune", "--lr", "nan"], 2, r"^gelulab swap: error: --lr nan: expected a finite number > 0"),
    (["swap", "--lr=-1"], 2, r"^gelulab swap: error: --lr -1\.0: expected a finite number > 0"),
    (["swap", "--finetune", "--steps", "0"], 2,
     r"^gelulab swap: error: --steps 0: expected an integer from 1 to 100000$"),
    (["swap", "--finetune", "--steps", "100000000000"], 2,
     r"^gelulab swap: error: --steps 100000000000: expected an integer from 1 to 100000$"),
    (["swap", "--batch-size", "0"], 2, r"^gelulab swap: error: --batch-size 0: expected an integer from 1 to 1024$"),
    (["swap", "--finetune", "--train-sentences", "100000000000"], 2,
     r"^gelulab swap: error: --train-sentences 100000000000: expected an integer from 1 to 100000$"),
    (["swap", "--finetune", "--finetune-batch", "64", "--train-sentences", "32"], 2,
     (r"^gelulab swap: error: --finetune-batch 64: expected an integer from 1 to 32 \(and at most "
     r"--train-sentences=32\)$")),
    (["swap", "--seed", "-1"], 2, r"^gelulab swap: error: --seed -1: expected an integer from 0 to 4294967295$"),
]
