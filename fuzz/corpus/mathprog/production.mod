var x >= 0;
var y >= 0;
maximize profit: 3 * x + 2 * y;
s.t. wood: x + y <= 4;
s.t. labour: x + 3 * y <= 6;
s.t. xcap: x <= 3;
solve;
printf "Optimal objective: %g\n", profit;
end;
