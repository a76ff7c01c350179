"""What chapter 9 (When AMP goes wrong, ``09_when_amp_goes_wrong``) says: the users'
questions as a symptom index (on the page), and one module per question the chapter
answers with a reproduction, a diagnosis and a fix checked by a run: ``overflow``
(question 2), ``weight_copies`` (5), ``scheduler`` (8), ``compile_autocast`` (10, 11),
``recompute`` (12), ``ranks`` (14), ``tf32`` (17), ``fp8`` (18, a prediction)."""
