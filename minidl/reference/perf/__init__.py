"""Performance models in their textbook form: work and depth of layers, allreduce costs, scaling.

work_depth.py      work W and depth D of convolution, fully connected, pooling and
                   activation layers (Ben-Nun & Hoefler 2019, Tables 4 and 6)
allreduce_cost.py  alpha-beta-gamma time of ring, recursive doubling, binomial tree and
                   Rabenseifner allreduce (Thakur, Rabenseifner & Gropp 2005;
                   Ben-Nun & Hoefler 2019, §2.5)
scaling.py         time per iteration, speedup and efficiency of data-parallel SGD on
                   n nodes (Keuper & Pfreundt 2016), with Amdahl's serial fraction
"""
