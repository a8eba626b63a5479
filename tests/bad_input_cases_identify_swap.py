"""Bad inputs of `gelulab identify` and `gelulab swap`: each row is (argv after `gelulab`, the exit code, a regular
expression the first line of stderr matches). Every row is refused before anything is written: identify writes
nothing, and swap checks its options before it touches --out. The cases that need files (a model folder with an
impossible config.json, a link out of the folder) are in tests/test_swap.py.
"""
from __future__ import annotations

_RESTRICTED = r" is not accepted in an identify expression .*; --allow-python evaluates it as Python, which runs " \
              r"arbitrary code$"

IDENTIFY_SWAP_CASES = [
    # identify: the user's callable fails on the probe
    (["identify", "lambda x: 1/0"], 2,
     (r"^gelulab identify: error: 'lambda x: 1/0': the callable raised ZeroDivisionError: division by zero on a "
     r"float32 numpy array of shape \(2,\)$")),
    (["identify", "lambda x: numpy.ones(2**50)"], 2,
     (r"^gelulab identify: error: 'lambda x: numpy\.ones\(2\*\*50\)': the callable raised MemoryError: Unable to "
     r"allocate .* on a float32 numpy array of shape \(2,\)$")),
    (["identify", "lambda x: x.no_such_method()"], 2,
     (r"^gelulab identify: error: 'lambda x: x\.no_such_method\(\)': .* could not be called on an array of any "
     r"imported framework \(numpy: AttributeError: ")),
    # identify: expressions outside the restricted form (nothing is imported or run)
    (["identify", "__import__('os').system('touch X')"], 2,
     r"^gelulab identify: error: \"__import__\('os'\)\.system\('touch X'\)\": the name '__import__'" + _RESTRICTED),
    (["identify", "os.system('touch X')"], 2, r"^gelulab identify: error: .*: the name 'os'" + _RESTRICTED),
    (["identify", "open('X', 'w')"], 2, r"^gelulab identify: error: .*: the name 'open'" + _RESTRICTED),
    (["identify", "numpy.load('x.npy', allow_pickle=True)"], 2,
     r"^gelulab identify: error: .*: the attribute 'load' \(file, process or import access\)" + _RESTRICTED),
    (["identify", "lambda x: x.__class__"], 2, r"^gelulab identify: error: .*: the attribute '__class__'" + _RESTRICTED),
    (["identify", "gelulab.cli.main"], 2,
     r"^gelulab identify: error: 'gelulab\.cli\.main': the module gelulab\.cli \(the attribute 'cli'\)" + _RESTRICTED),
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
