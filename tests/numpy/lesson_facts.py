"""The numbers the two seed lessons print, stored so that `qkv demo` can be
checked against them without the lesson texts (../shared/seeds/).

Only printed output is kept here, never the lessons' prose or code:
- lesson 2 ("Self-attention from scratch"): every block under a line reading
  "Output", by section, and its table of model sizes;
- lesson 5, which shows its code but not its printed matrix: the lines its
  NumPy code prints (`print(weights.round(2))` after `np.random.seed(0)`), and
  the shape it writes as a comment after a print call.
test_demo.py's test_stored_facts_are_the_lessons checks, where the lesson
texts are present, that these are still exactly what they say.
"""

# Lesson 2's Output blocks, in the lesson's order, by the demo section that prints them.
LESSON2_OUTPUT_BLOCKS = {
    "2.2": [
        ["(4, 3) (4, 3) (4, 3)"],
        ["[[-0.01 -0.35 -0.19 -0.13]",
         " [-0.09 -4.31 -1.5  -1.24]",
         " [-0.06 -3.79 -0.67 -0.71]",
         " [-0.05 -1.1  -0.4  -0.38]]"],
        ["[[0.27 0.22 0.25 0.25]",
         " [0.49 0.04 0.22 0.25]",
         " [0.4  0.05 0.28 0.27]",
         " [0.31 0.17 0.26 0.26]]",
         "[1. 1. 1. 1.]"],
        ["(4, 3)",
         "the   attends most to 'the' (27%)",
         "cat   attends most to 'the' (49%)",
         "sat   attends most to 'the' (40%)",
         "down  attends most to 'the' (31%)"],
        ["True"],
    ],
    "2.3": [
        ["d=    4  std of q·k =    2.1   after /√d = 1.05",
         "d=   64  std of q·k =    8.2   after /√d = 1.03",
         "d= 1024  std of q·k =   30.4   after /√d = 0.95"],
    ],
    "2.4": [
        ["[[1 0 0 0]",
         " [1 1 0 0]",
         " [1 1 1 0]",
         " [1 1 1 1]]",
         "[[1.   0.   0.   0.  ]",
         " [0.92 0.08 0.   0.  ]",
         " [0.55 0.06 0.39 0.  ]",
         " [0.31 0.17 0.26 0.26]]"],
    ],
    "2.5": [
        ["(5, 8) → (5, 8)"],
    ],
}

# Lesson 2's model-size table, each row split on white space (header first).
LESSON2_MODEL_TABLE = [
    ["Model", "d_model", "Heads", "d_head", "Layers"],
    ["BERT-base", "768", "12", "64", "12"],
    ["GPT-2", "small", "768", "12", "64", "12"],
    ["Llama", "3", "8B", "4096", "32", "128", "32"],
    ["Llama", "3", "70B", "8192", "64", "128", "80"],
]

# What lesson 5's NumPy code prints: its causal head's weights, rounded to 2 decimals.
LESSON5_WEIGHTS = [
    "[[1.   0.   0.   0.  ]",
    " [0.42 0.58 0.   0.  ]",
    " [0.07 0.25 0.69 0.  ]",
    " [0.05 0.48 0.35 0.12]]",
]

# The shapes lesson 5 writes as comments after its print calls.
LESSON5_SHAPES = ["torch.Size([2, 10, 16])"]
