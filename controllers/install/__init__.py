"""Installing the operator from inside itself (operations spec D.4-D.8): the worker's start-up steps
(``plan`` renders, ``prepare`` applies), the absence ensurers, and the Settings' status echo."""
